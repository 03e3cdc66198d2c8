#!/usr/bin/env python3
"""libcore/README.md tells the same story as the build: its area table lists exactly the areas that
libcore/CMakeLists.txt builds (mds_add_area) and that have a folder under libcore/src and
libcore/include/mds, each with the dependencies CMake links and its LibTorch column; and
docs/architecture.md names every area."""
import os
import re
import sys

SRC = os.environ.get("MDS_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))

# CMake link items → the names the README uses for them; items the README leaves out map to None.
EXTERNAL = {
    "Threads::Threads": None,
    "PkgConfig::ZSTD": "zstd",
    "CLI11::CLI11": "CLI11",
    "nlohmann_json::nlohmann_json": "nlohmann/json",
    "CURL::libcurl": "libcurl",
    "OpenSSL::Crypto": "OpenSSL libcrypto",
    "torch": None,  # the LibTorch column
}


def cmake_areas(text):
    """{area: (set of README dependency names, links LibTorch)} from mds_add_area calls."""
    areas = {}
    for m in re.finditer(r"^\s*mds_add_area\((\w+)([^)]*)\)", text, re.M):
        name, items = m.group(1), m.group(2).split()
        deps = set()
        for it in items:
            if it.startswith("mds::"):
                deps.add(it[len("mds::"):])
            elif it in EXTERNAL:
                if EXTERNAL[it]:
                    deps.add(EXTERNAL[it])
            else:
                raise SystemExit(f"libcore/CMakeLists.txt: mds_add_area({name}): link item {it!r} has no README name "
                                 f"in this test's EXTERNAL table")
        areas[name] = (deps, "torch" in items)
    # Extra links added after the area (target_link_libraries(mds_X PRIVATE ...)): the dl library, and torch, which
    # the areas that call kernels/ link after it (so that CUDA's static runtime comes first on the link line).
    for m in re.finditer(r"^\s*target_link_libraries\(mds_(\w+)\s+(?:PUBLIC|PRIVATE)\s+([^)]*)\)", text, re.M):
        if m.group(1) in areas:
            deps, torch = areas[m.group(1)]
            for it in m.group(2).split():
                if it == "${CMAKE_DL_LIBS}":
                    deps.add("dl")
                elif it == "torch":
                    torch = True
            areas[m.group(1)] = (deps, torch)
    return areas


def readme_areas(text):
    """{area: (set of dependency names, LibTorch yes/no)} from the README's table."""
    areas = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"`\w+`", cells[0]):
            continue
        deps = {d.strip() for d in re.sub(r"\(.*?\)", "", cells[2]).split(",") if d.strip()}
        areas[cells[0].strip("`")] = (deps, "yes" in cells[3].lower())
    return areas


def main():
    failures = []
    cmake = cmake_areas(open(os.path.join(SRC, "libcore", "CMakeLists.txt")).read())
    readme = readme_areas(open(os.path.join(SRC, "libcore", "README.md")).read())
    if not cmake:
        failures.append("no mds_add_area call found in libcore/CMakeLists.txt")
    src_dirs = set(os.listdir(os.path.join(SRC, "libcore", "src")))
    inc_dirs = set(os.listdir(os.path.join(SRC, "libcore", "include", "mds")))
    for area in sorted(set(cmake) | set(readme)):
        if area not in cmake:
            failures.append(f"libcore/README.md lists area {area!r}, which libcore/CMakeLists.txt does not build")
            continue
        if area not in readme:
            failures.append(f"libcore/CMakeLists.txt builds area {area!r}, which libcore/README.md's table does not list")
            continue
        (cdeps, ctorch), (rdeps, rtorch) = cmake[area], readme[area]
        if cdeps != rdeps:
            failures.append(f"area {area}: README says it depends on {sorted(rdeps)}, CMake links {sorted(cdeps)}")
        if ctorch != rtorch:
            failures.append(f"area {area}: README's LibTorch column says {'yes' if rtorch else 'no'}, CMake "
                            f"{'links' if ctorch else 'does not link'} torch")
        if area not in src_dirs or area not in inc_dirs:
            failures.append(f"area {area}: libcore/src/{area} and libcore/include/mds/{area} must both exist")
    for d in sorted((src_dirs | inc_dirs) - set(cmake)):
        failures.append(f"libcore/src or include/mds has folder {d!r}, which is no area of libcore/CMakeLists.txt")
    arch = os.path.join(SRC, "docs", "architecture.md")
    if not os.path.exists(arch):
        failures.append("docs/architecture.md is missing")
    else:
        text = open(arch).read()
        for area in sorted(cmake):
            if f"`{area}`" not in text:
                failures.append(f"docs/architecture.md does not name area `{area}`")
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"libcore/README.md, libcore/CMakeLists.txt and docs/architecture.md agree on {len(cmake)} areas")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
