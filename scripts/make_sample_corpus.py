#!/usr/bin/env python3
"""Builds data/sample/corpus.jsonl.zst: the docstrings of the Python 3.11 standard library.

The corpus is what the README's main job (scripts/demo.sh) trains a tokenizer on and
preprocesses, so it must be redistributable (PSF License, see data/sample/README.md) and
reproducible. One JSON record per documented module, class, function, method or property:

    {"id":N,"text":"<inspect.cleandoc(docstring)>"}

Rules, all deterministic:
  * modules: every top-level name of sys.stdlib_module_names that imports on this platform, and
    the submodules of its packages, minus tests, demos, __main__ modules and modules with import
    side effects (antigravity opens a browser, this prints);
  * objects: public module attributes (no leading underscore) and the public or dunder members
    defined in their classes' own __dict__; each is named by where it is defined
    (obj.__module__ + "." + obj.__qualname__), so a re-export is the same record;
  * texts shorter than MIN_CHARS characters, containing a memory address (" at 0x..."), or not
    encodable as UTF-8 are skipped; identical texts are kept once (the first qualified name);
  * records are sorted by qualified name; ids count from 0 in that order.

Lines are written the way pandas' to_json(orient="records", lines=True, force_ascii=False) wrote
OSCAR: compact separators, non-ASCII characters as they are, "/" escaped as "\\/".

Usage:
    python3.11 scripts/make_sample_corpus.py [--output data/sample/corpus.jsonl.zst]
            [--min-chars 80] [--jsonl-only]
Needs the `zstd` command-line tool (level 19) unless --jsonl-only is given.
"""

import argparse
import hashlib
import importlib
import inspect
import io
import json
import os
import pkgutil
import re
import subprocess
import sys
import warnings

MIN_CHARS = 80

# Modules with side effects on import, or whose content is not documentation.
SKIP_MODULES = {
    "antigravity",  # opens a web browser
    "this",  # prints the Zen of Python
    "idlelib",  # the IDLE application (imports tkinter, many private helpers)
    "turtledemo",  # demo scripts
    "pydoc_data",  # topics as data, not docstrings
    "ensurepip",  # bundles wheels; no API to speak of
    "lib2to3",  # deprecated tool; its fixer docstrings are boilerplate
    "test",
}
SKIP_PARTS = {"test", "tests", "idle_test", "__main__", "_test", "testing"}

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def module_names():
    """Sorted stdlib module names importable here, packages expanded to their submodules."""
    out = set()
    for top in sorted(sys.stdlib_module_names):
        if top.startswith("_") or top in SKIP_MODULES:
            continue
        mod = try_import(top)
        if mod is None:
            continue
        out.add(top)
        path = getattr(mod, "__path__", None)
        if not path:
            continue
        for info in pkgutil.walk_packages(path, prefix=top + ".", onerror=lambda name: None):
            parts = info.name.split(".")
            if any(p in SKIP_PARTS or p.startswith("_") for p in parts[1:]):
                continue
            if try_import(info.name) is not None:
                out.add(info.name)
    return sorted(out)


def try_import(name):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Some modules print on import failure paths; keep stdout for nothing but results.
            saved = sys.stdout
            sys.stdout = io.StringIO()
            try:
                return importlib.import_module(name)
            finally:
                sys.stdout = saved
    except BaseException:  # ImportError, platform-specific errors, SystemExit from scripts
        return None


def own_doc(obj):
    """The docstring an object defines itself (not one inherited through its type)."""
    doc = getattr(obj, "__doc__", None)
    if not isinstance(doc, str):
        return None
    if not (inspect.isclass(obj) or inspect.ismodule(obj) or callable(obj) or isinstance(obj, property)
            or inspect.isgetsetdescriptor(obj) or inspect.ismemberdescriptor(obj)):
        return None  # instances (constants, singletons) carry their type's docstring
    return doc


def qualified(obj, fallback):
    mod = getattr(obj, "__module__", None)
    qn = getattr(obj, "__qualname__", None)
    if isinstance(mod, str) and isinstance(qn, str) and "<" not in qn:
        return mod + "." + qn
    return fallback


def collect():
    docs = {}  # qualified name -> raw docstring

    def add(name, doc):
        if doc and name not in docs:
            docs[name] = doc

    for modname in module_names():
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        add(modname, own_doc(mod))
        for attr in sorted(vars(mod)):
            if attr.startswith("_"):
                continue
            obj = vars(mod)[attr]
            if inspect.ismodule(obj):
                continue
            if not (inspect.isclass(obj) or inspect.isroutine(obj)):
                continue
            qn = qualified(obj, modname + "." + attr)
            add(qn, own_doc(obj))
            if inspect.isclass(obj):
                for mname in sorted(vars(obj)):
                    if mname.startswith("_") and not (mname.startswith("__") and mname.endswith("__")):
                        continue
                    member = vars(obj)[mname]
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if isinstance(member, property) or inspect.isroutine(member) or \
                            inspect.isgetsetdescriptor(member) or inspect.ismemberdescriptor(member):
                        add(qn + "." + mname, own_doc(member))
    return docs


def records(min_chars):
    seen = set()
    for name, raw in sorted(collect().items()):
        text = inspect.cleandoc(raw)
        if len(text) < min_chars or ADDRESS.search(text):
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates
            continue
        if text in seen:
            continue
        seen.add(text)
        yield name, text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--output", default=os.path.join(root, "data", "sample", "corpus.jsonl.zst"))
    ap.add_argument("--min-chars", type=int, default=MIN_CHARS)
    ap.add_argument("--jsonl-only", action="store_true", help="write uncompressed jsonl to --output")
    args = ap.parse_args()
    if sys.version_info[:2] != (3, 11):
        sys.exit(f"make_sample_corpus: needs Python 3.11 (this is {sys.version.split()[0]})")

    lines = []
    for i, (_, text) in enumerate(records(args.min_chars)):
        line = json.dumps({"id": i, "text": text}, ensure_ascii=False, separators=(",", ":"))
        lines.append(line.replace("/", "\\/"))  # every "/" is inside a string value: pandas' ujson escaping
    data = ("\n".join(lines) + "\n").encode("utf-8")

    tmp = args.output + ".tmp"
    if args.jsonl_only:
        with open(tmp, "wb") as f:
            f.write(data)
    else:
        with open(tmp, "wb") as f:
            subprocess.run(["zstd", "-19", "-q", "-c", "--no-progress"], input=data, stdout=f, check=True)
    os.replace(tmp, args.output)
    print(f"make_sample_corpus: {len(lines)} records, {len(data)} bytes uncompressed, "
          f"{os.path.getsize(args.output)} bytes in {args.output} "
          f"(sha256 of the jsonl {hashlib.sha256(data).hexdigest()}; Python {sys.version.split()[0]})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
