#!/bin/sh
# setup_script.sh SETUP_SH: scripts/setup.sh with stand-ins for dpkg, id,
# apt-get and sudo (nothing is installed): it wants python3; as root it runs
# apt-get itself, with no sudo on the machine; as another user it goes
# through sudo when there is one, and without sudo it stops with a message
# that says so.
set -u
setup=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stub=$work/bin
mkdir "$stub"
for tool in grep; do ln -s "$(command -v $tool)" "$stub/$tool"; done
cat >"$stub/dpkg" <<'STUB'
#!/bin/sh
# dpkg -s PKG: installed unless PKG is in STUB_MISSING.
case " $STUB_MISSING " in *" $2 "*) exit 1 ;; esac
echo "Status: install ok installed"
STUB
cat >"$stub/id" <<'STUB'
#!/bin/sh
echo "$STUB_UID"
STUB
cat >"$stub/apt-get" <<'STUB'
#!/bin/sh
echo "apt-get $* (as ${STUB_AS:-self})" >>"$STUB_LOG"
STUB
cat >"$work/sudo" <<'STUB'
#!/bin/sh
[ "$1" = "-n" ] && exit 0
STUB_AS=sudo "$@"
STUB
chmod +x "$stub"/* "$work/sudo"
bash=$(command -v bash)
status=0
fail() { echo "FAIL: $*"; status=1; }

# 1. root, no sudo: apt-get directly, and python3 is among the packages.
log=$work/root.log
: >"$log"
STUB_MISSING="python3 cmake" STUB_UID=0 STUB_LOG=$log PATH=$stub \
  "$bash" "$setup" >"$work/out" 2>&1 || fail "as root without sudo: exit $? ($(cat "$work/out"))"
grep -q "apt-get install .*python3.* (as self)" "$log" ||
  fail "as root: expected 'apt-get install ... python3' without sudo; got: $(cat "$log")"

# 2. another user, no sudo: exit 1, and a message that says sudo is missing.
log=$work/user.log
: >"$log"
if STUB_MISSING=cmake STUB_UID=1000 STUB_LOG=$log PATH=$stub \
  "$bash" "$setup" >"$work/out" 2>&1; then
  fail "as a user without sudo: exit 0, expected 1"
fi
grep -q "sudo is not installed" "$work/out" ||
  fail "as a user without sudo: no clear message: $(cat "$work/out")"
[ -s "$log" ] && fail "as a user without sudo: apt-get ran: $(cat "$log")"

# 3. another user with sudo: apt-get through sudo.
cp "$work/sudo" "$stub/sudo"
log=$work/sudo.log
: >"$log"
STUB_MISSING=cmake STUB_UID=1000 STUB_LOG=$log PATH=$stub \
  "$bash" "$setup" >"$work/out" 2>&1 || fail "as a user with sudo: exit $? ($(cat "$work/out"))"
grep -q "apt-get install .*cmake (as sudo)" "$log" ||
  fail "as a user with sudo: expected apt-get through sudo; got: $(cat "$log")"

# 4. nothing missing: no apt-get at all.
log=$work/none.log
: >"$log"
STUB_MISSING= STUB_UID=1000 STUB_LOG=$log PATH=$stub "$bash" "$setup" >/dev/null 2>&1 ||
  fail "with nothing missing: exit $?"
[ -s "$log" ] && fail "with nothing missing: apt-get ran: $(cat "$log")"

[ $status -eq 0 ] && echo "OK: setup.sh as root, as a user with and without sudo"
exit $status
