#!/usr/bin/env python3
"""Builds data/sample/corpus.jsonl.zst: the docstrings of the Python 3.11 standard library.

The corpus is what the README's main job (scripts/demo.sh) trains a tokenizer on and then
preprocesses, so it must be redistributable (PSF License, see data/sample/README.md) and
reproducible. One JSON record per documented module, class, function or method:

    {"id":N,"text":"<the docstring, cleaned with inspect.cleandoc>"}

Sources, all read from the running CPython 3.11 installation:
  1. the Python modules of the standard library (Lib/**/*.py), parsed with `ast` (nothing is
     imported or run): the docstrings of modules, classes, functions and methods at any depth,
     named <module>.<class>.<function>, test suites included (Lib/test is part of the
     standard library); site-packages and the build configuration folder are left out;
  2. the modules written in C (sys.builtin_module_names and lib-dynload), imported and
     introspected: module, attributes, and the members of their classes; test and example
     modules (_test*, xx*, *_test) are left out;
  3. pydoc_data.topics, the language reference pages that help() shows, one record per topic.

Rules: texts shorter than --min-chars characters, with a memory address (" at 0x..."), or not
encodable as UTF-8 are skipped; identical texts are kept once (the first qualified name in sorted
order); records are sorted by qualified name; ids count from 0 in that order. The same CPython
version on the same platform gives the same bytes.

Lines are written the way pandas' to_json(orient="records", lines=True, force_ascii=False) wrote
OSCAR: compact separators, non-ASCII characters as they are, "/" escaped as "\\/".

Usage:
    python3.11 scripts/make_sample_corpus.py [--output data/sample/corpus.jsonl.zst]
                                             [--min-chars 40] [--jsonl-only]
Needs the `zstd` command-line tool (it compresses at level 19) unless --jsonl-only is given.
"""

import argparse
import ast
import hashlib
import importlib
import inspect
import io
import json
import os
import re
import subprocess
import sys
import sysconfig
import warnings

MIN_CHARS = 40

SKIP_DIRS = {"site-packages", "__pycache__"}
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def python_docstrings(lib):
    """(qualified name, cleaned docstring) of every module, class and function in Lib/."""
    for dirpath, dirnames, filenames in os.walk(lib):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("config-"))
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, lib)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            module = ".".join(rel)
            with open(path, "rb") as f:
                source = f.read()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # invalid escape sequences in old modules
                    tree = ast.parse(source, filename=path)
            except (SyntaxError, ValueError):
                continue
            yield from _walk(tree, module)


def _walk(node, name):
    doc = ast.get_docstring(node, clean=True)  # inspect.cleandoc
    if doc:
        yield name, doc
    for child in ast.iter_child_nodes(node):
        yield from _walk_children(child, name)


def _walk_children(node, name):
    if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        yield from _walk(node, name + "." + node.name)
    else:  # definitions inside if/try/with blocks
        for child in ast.iter_child_nodes(node):
            yield from _walk_children(child, name)


def c_module_names():
    names = set(sys.builtin_module_names)
    dynload = os.path.join(sys.base_prefix, "lib", "python3.11", "lib-dynload")
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    if os.path.isdir(dynload):
        names.update(fn[: -len(suffix)] for fn in os.listdir(dynload) if fn.endswith(suffix))
    return sorted(n for n in names
                  if not (n.startswith("_test") or n.startswith("xx") or n.startswith("_xx") or n.endswith("_test")))


def _import(name):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            saved, sys.stdout = sys.stdout, io.StringIO()
            try:
                return importlib.import_module(name)
            finally:
                sys.stdout = saved
    except Exception:  # not built on this platform
        return None


def _own_doc(obj):
    doc = getattr(obj, "__doc__", None)
    return doc if isinstance(doc, str) else None


def c_docstrings():
    """(qualified name, cleaned docstring) of the C modules, their functions and classes."""
    for modname in c_module_names():
        mod = _import(modname)
        if mod is None:
            continue
        if _own_doc(mod):
            yield modname, inspect.cleandoc(mod.__doc__)
        for attr in sorted(vars(mod)):
            obj = vars(mod)[attr]
            if attr.startswith("__") or not (inspect.isclass(obj) or inspect.isroutine(obj)):
                continue
            qn = modname + "." + attr
            if _own_doc(obj):
                yield qn, inspect.cleandoc(obj.__doc__)
            if not inspect.isclass(obj):
                continue
            for mname in sorted(vars(obj)):
                member = vars(obj)[mname]
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if (inspect.isroutine(member) or inspect.isgetsetdescriptor(member)
                        or inspect.ismemberdescriptor(member) or isinstance(member, property)):
                    if _own_doc(member):
                        yield qn + "." + mname, inspect.cleandoc(member.__doc__)


def topic_docstrings():
    topics = _import("pydoc_data.topics")
    if topics is None:
        return
    for key in sorted(topics.topics):
        yield "pydoc_data.topics." + key, inspect.cleandoc(topics.topics[key])


def records(min_chars):
    lib = os.path.join(sys.base_prefix, "lib", "python3.11")
    docs = {}
    for source in (python_docstrings(lib), c_docstrings(), topic_docstrings()):
        for name, text in source:
            docs.setdefault(name, text)  # a name defined twice (if/else branches): the first
    seen = set()
    for name in sorted(docs):
        text = docs[name]
        if len(text) < min_chars or ADDRESS.search(text) or text in seen:
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates
            continue
        seen.add(text)
        yield name, text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--output", default=os.path.join(root, "data", "sample", "corpus.jsonl.zst"))
    ap.add_argument("--min-chars", type=int, default=MIN_CHARS, help="skip shorter docstrings")
    ap.add_argument("--jsonl-only", action="store_true", help="write uncompressed jsonl to --output")
    args = ap.parse_args()
    if sys.version_info[:2] != (3, 11):
        sys.exit(f"make_sample_corpus: needs CPython 3.11 (this is {sys.version.split()[0]})")

    lines = []
    for i, (_, text) in enumerate(records(args.min_chars)):
        line = json.dumps({"id": i, "text": text}, ensure_ascii=False, separators=(",", ":"))
        lines.append(line.replace("/", "\\/"))  # every "/" is inside a string: pandas' escaping
    data = ("\n".join(lines) + "\n").encode("utf-8")

    tmp = args.output + ".tmp"
    with open(tmp, "wb") as f:
        if args.jsonl_only:
            f.write(data)
        else:
            subprocess.run(["zstd", "-19", "-q", "-c"], input=data, stdout=f, check=True)
    os.replace(tmp, args.output)
    print(f"make_sample_corpus: {len(lines)} records, {len(data)} bytes of jsonl "
          f"(sha256 {hashlib.sha256(data).hexdigest()}), {os.path.getsize(args.output)} bytes in "
          f"{args.output}; Python {sys.version.split()[0]} on {sys.platform}", file=sys.stderr)


if __name__ == "__main__":
    main()
