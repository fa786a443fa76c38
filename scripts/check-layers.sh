#!/usr/bin/env bash
# check-layers.sh - fail when the files of a folder call each other in a loop.
#   bash scripts/check-layers.sh [--edges] OBJECT.o...
# From the object files' symbol tables (nm): file A calls file B when A uses
# a global symbol that B defines. The edges go through tsort(1), which
# names the files of a loop when there is one. --edges prints the edges
# ("A -> B") too. ctest runs it on backends/nccl_like (unit.nccl_like_layers,
# tests/nccl_like.cmake), on trainer/ (unit.trainer_layers,
# tests/trainer.cmake) and on core/ (unit.core_layers, tests/CMakeLists.txt);
# docs/nccl_like.md gives the command for its graph.
set -euo pipefail
print_edges=0
if [ "${1:-}" = --edges ]; then
  print_edges=1
  shift
fi
[ $# -gt 0 ] || { echo "usage: $0 [--edges] OBJECT.o..." >&2; exit 2; }

name_of() { basename "$1" .o; }
defs=$(mktemp) uses=$(mktemp)
trap 'rm -f "$defs" "$uses"' EXIT
for obj in "$@"; do
  file=$(name_of "$obj")
  nm --defined-only --extern-only "$obj" | awk -v f="$file" 'NF == 3 {print $3, f}' >>"$defs"
  nm --undefined-only "$obj" | awk -v f="$file" '{print $NF, f}' >>"$uses"
done
# "A B" for every symbol B defines and A uses, once per pair; each file is
# also paired with itself so that tsort knows every file.
edges=$(join <(sort -u "$uses") <(sort -u "$defs") | awk '$2 != $3 {print $2, $3}' | sort -u)
if [ "$print_edges" = 1 ] && [ -n "$edges" ]; then
  printf '%s\n' "$edges" | awk '{print $1 " -> " $2}'
fi
nodes=$(for obj in "$@"; do f=$(name_of "$obj"); echo "$f $f"; done)
if ! printf '%s\n%s\n' "$edges" "$nodes" | tsort >/dev/null 2>"$defs"; then
  echo "check-layers: the files call each other in a loop:" >&2
  grep -v 'input contains a loop' "$defs" | sed 's/^tsort: //; s/^/  /' >&2
  exit 1
fi
echo "check-layers: $# files, $(printf '%s' "$edges" | grep -c . || true) edges, no loop"
