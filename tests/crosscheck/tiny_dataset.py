"""A small Megatron dataset made by mds itself from the bundled corpus, for the tests that train:
make(tmp, bin_dir, source_dir, vocab_size) trains a byte-level BPE of vocab_size tokens with mds-tokenizer-train
and tokenizes data/sample/corpus.jsonl.zst with mds-preprocess (--append-eod). Returns (prefix, vocab.json,
merges.txt)."""
import os
import subprocess


def make(tmp, bin_dir, source_dir, vocab_size):
    corpus = os.path.join(source_dir, "data", "sample", "corpus.jsonl.zst")
    subprocess.run([os.path.join(bin_dir, "mds-tokenizer-train"), "--input", corpus, "--vocab-size", str(vocab_size),
                    "--output-dir", tmp + "/tok", "--quiet"], check=True)
    subprocess.run([os.path.join(bin_dir, "mds-preprocess"), "--input", corpus, "--output-prefix", tmp + "/data",
                    "--vocab-file", tmp + "/tok/vocab.json", "--merge-file", tmp + "/tok/merges.txt", "--append-eod",
                    "--workers", "2", "--quiet"], check=True)
    return tmp + "/data_text_document", tmp + "/tok/vocab.json", tmp + "/tok/merges.txt"
