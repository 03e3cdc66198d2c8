#!/usr/bin/env python3
"""test_bmd_resume.py's bf16 (ZeRO stage 0, BF16_Optimizer files), fp16 (ZeRO stage 1) and dropout cases at PP=1,
PP=2 and TP=2: checkpoints resume both ways between mds-train and BigScience's real Megatron-DeepSpeed with the
same curves (test_bmd_resume.py's docstring says what is compared). A ctest entry of its own so that each stays
well inside ctest's time limit on 2 cores. Exits 77 as test_bmd_resume.py does."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_bmd_resume  # noqa: E402

if __name__ == "__main__":
    test_bmd_resume.main(test_bmd_resume.PRECISION_CASES)
