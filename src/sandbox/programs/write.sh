# tether file writer (decisions.md D14; docs/sandbox.md).
#   sh -c "$PROGRAM" tether-write PATH SIZE MODE      (stdin: NONCE\n, then the bytes)
# The NONCE (32 hex digits) travels on stdin, never in argv: another process of the container
# can read this program's cmdline, and could write a forged receipt to its stdout.
# Puts the bytes in place at PATH only once the size received is SIZE: written to a temp file
# beside PATH, given MODE (octal), then renamed over PATH. Says what it did on stdout:
#   tether-write NONCE wrote SIZE          the file is in place
#   tether-write NONCE refused REASON …    nothing was put in place
# A write is a success only when the `wrote` line arrived. A cut stream, a directory at PATH
# and a signal (HUP, INT, TERM, PIPE) leave nothing in place and no temp file behind.
# Allexport would export the nonce to the commands this program runs (cat, chmod, mv).
set +e +u +x +v +a
set +m 2>/dev/null
# Its tools from directories this uid cannot write (prelude.sh).
PATH=$tether_safe_path

path=$1 size=$2 mode=$3
# read_nonce, put and nl: the prelude's (prelude.sh). The bytes start right after the nonce line.
read_nonce tether-write
say() { put "tether-write $nonce $*$nl"; }

if [ -d "$path" ]; then
  say refused directory
  exit 3
fi
case $path in
  */*) dir=${path%/*} ;;
  *) dir=. ;;
esac
[ -n "$dir" ] || dir=/
tmp=$dir/.${path##*/}.tether-write.$$

# cat runs asynchronously so that a signal reaches the trap at once, not after cat's EOF.
catpid=
cleanup() {
  [ -z "$catpid" ] || kill "$catpid" 2>/dev/null
  rm -f "$tmp"
}
trap 'cleanup; exit 129' HUP
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap 'cleanup; exit 141' PIPE

umask 077
exec 3<&0
cat >"$tmp" <&3 3<&- &
catpid=$!
exec 3<&-
wait "$catpid"
rc=$?
catpid=
if [ $rc -ne 0 ]; then
  cleanup
  say refused write-error "$rc"
  exit 4
fi
received=$(($(wc -c <"$tmp")))
if [ "$received" != "$size" ]; then
  cleanup
  say refused size "$received" "$size"
  exit 5
fi
if ! chmod "$mode" "$tmp"; then
  cleanup
  say refused chmod "$mode"
  exit 4
fi
# Looked at again just before the rename: mv onto a directory would move the file into it.
if [ -d "$path" ]; then
  cleanup
  say refused directory
  exit 3
fi
if ! mv -f "$tmp" "$path"; then
  cleanup
  say refused rename
  exit 4
fi
say wrote "$received"
