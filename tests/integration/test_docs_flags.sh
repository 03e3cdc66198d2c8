#!/usr/bin/env bash
# Every flag that a tool's --help lists is described in docs/<tool>.md, and every tool has a page.
set -euo pipefail
fail=0
for bin in "$MDS_BIN"/mds-*; do
  tool=$(basename "$bin")
  page="$MDS_SOURCE_DIR/docs/$tool.md"
  if [[ ! -f "$page" ]]; then echo "FAIL: $tool has no docs/$tool.md"; fail=1; continue; fi
  "$bin" --help > /dev/null || { echo "FAIL: $tool --help exited non-zero"; fail=1; }
  for flag in $("$bin" --help | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u); do
    grep -qE -- "\`$flag([^a-z0-9-]|\$)" "$page" || { echo "FAIL: $tool: $flag is in --help but not in docs/$tool.md"; fail=1; }
  done
done
[[ $fail == 0 ]] && echo "all flags documented"
exit $fail
