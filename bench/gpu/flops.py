"""FLOPs and peak rates for bench/gpu's MFU columns, the same numbers for every implementation.

Two FLOP counts of one GPT training step, both for a model without activation recomputation:
  - llm.c's (karpathy/llm.c train_gpt2.cu gpt2_estimate_mfu, after Kaplan et al. 2020 §2.1):
    6·N + 6·L·C·T per token, N = every parameter as llm.c counts it (padded vocabulary, positions, biases,
    LayerNorms), times the tokens of the step;
  - Megatron's (libcore/src/observe/flops.cpp, what mds-train's TFLOPs field prints; Narayanan et al. 2021 Eq. 3):
    c·f·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), c = 24, f = 3, B the global batch, V the padded vocabulary.
MFU = FLOPs per second / the device's peak. The peak is llm.c's for the device's name (llmc/mfu.h
get_flops_promised, read from the llm.c source when it is there), else NVIDIA's datasheet dense rate, else
one measured by bench/gpu (a large matrix product: the CPU case), else given with --peak-tflops."""
import os
import re

# NVIDIA's datasheet dense bf16 TFLOP/s, used when llm.c's source (and so its table) is not at hand.
DATASHEET_BF16 = {
    "NVIDIA H100 80GB HBM3": 989.4,  # H100 SXM5
    "NVIDIA H100 PCIe": 756.0,
    "NVIDIA H200": 989.4,            # H200 SXM: the H100 SXM's chip, tensor cores and clocks
    "NVIDIA A100-SXM4-80GB": 312.0,
    "NVIDIA A100-SXM4-40GB": 312.0,
    "NVIDIA A100-PCIE-40GB": 312.0,
    "NVIDIA A100-PCIE-80GB": 312.0,
}
# Devices llm.c's table does not name, looked up as another entry: the H200 SXM is the H100 SXM's GH100 with
# the same 528 tensor cores and 1830 MHz boost clock in NVIDIA's datasheets (more and faster memory only).
LLMC_ALIASES = {"NVIDIA H200": "NVIDIA H100 80GB HBM3"}


def llmc_parameters(layers, channels, max_seq, padded_vocab):
    """num_parameters of llm.c's GPT-2 (fill_in_parameter_sizes): Vp·C + T·C + L·(12C² + 13C) + 2C."""
    L, C = layers, channels
    return padded_vocab * C + max_seq * C + L * (12 * C * C + 13 * C) + 2 * C


def llmc_flops_per_token(layers, channels, seq, padded_vocab, max_seq=None):
    n = llmc_parameters(layers, channels, max_seq or seq, padded_vocab)
    return 6 * n + 6 * layers * channels * seq


def megatron_flops_per_iteration(layers, hidden, seq, padded_vocab, global_batch, recompute=False, glu=False):
    """libcore/src/observe/flops.cpp flops_per_iteration, with the same association of the arithmetic."""
    coefficient = 32.0 if glu else 24.0
    factor = 4.0 if recompute else 3.0
    b, s, l, h, v = float(global_batch), float(seq), float(layers), float(hidden), float(padded_vocab)
    return (coefficient * factor * b * s * l * (h * h)) * (1. + (s / (6. * h)) + (v / (16. * l * h)))


def llmc_peak_table(llmc_src):
    """{device name: bf16 TFLOP/s} from llm.c's llmc/mfu.h, computed as get_flops_promised does
    (BF_16_32 · new_cores / CORES · new_mhz / CLOCK); {} when the file is not there."""
    path = os.path.join(llmc_src or "", "llmc", "mfu.h")
    if not llmc_src or not os.path.isfile(path):
        return {}
    text = open(path).read()
    families = {}
    for m in re.finditer(r"static const PerfData (\w+) = \{([^}]*)\};", text):
        families[m.group(1)] = [float(x.strip().rstrip("fF")) for x in m.group(2).split(",")]
    table = {}
    for m in re.finditer(r'\{"([^"]+)", &(\w+), ([0-9.]+), ([0-9.]+)\}', text):
        name, fam, cores, mhz = m.group(1), m.group(2), float(m.group(3)), float(m.group(4))
        perf = families.get(fam)
        if perf and perf[1] > 0:
            table[name] = perf[1] * (cores / perf[7]) * (mhz / perf[6])
    return table


def peak_tflops(device_name, llmc_src):
    """(TFLOP/s, where it comes from) for bf16 on a named GPU, or (None, why not)."""
    table = llmc_peak_table(llmc_src)
    if device_name in table:
        return table[device_name], f"llm.c's table (llmc/mfu.h) for {device_name!r}"
    alias = LLMC_ALIASES.get(device_name)
    if alias and alias in table:
        return table[alias], f"llm.c's table for {alias!r} (same chip and clocks as {device_name!r}, which it does not list)"
    if device_name in DATASHEET_BF16:
        return DATASHEET_BF16[device_name], f"NVIDIA's datasheet dense bf16 for {device_name!r} (no llm.c table at hand)"
    return None, f"no peak known for {device_name!r}"
