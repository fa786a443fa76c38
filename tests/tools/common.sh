# common.sh - the opening the tools' test scripts share, sourced by them
# (not run): TOOLS_DIR from the script's first argument in $tools, a
# temporary folder $tmp removed at exit, fail MESSAGE counting $failures,
# and a clean environment: no XCOLL_* and no launcher variables.
tools=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
for v in $(env | sed -n 's/^\(XCOLL_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
