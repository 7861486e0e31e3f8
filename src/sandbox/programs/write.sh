# tether file writer (ADR-127 amendment §7, "the input proves its end"; docs/sandbox.md).
#   sh -c "$PROGRAM" tether-write NONCE PATH SIZE MODE      (the bytes on stdin)
# Puts the bytes in place at PATH only once the size received is SIZE: written to a temp file
# beside PATH, given MODE (octal), then renamed over PATH. Says what it did on stdout:
#   tether-write NONCE wrote SIZE          the file is in place
#   tether-write NONCE refused REASON …    nothing was put in place
# A write is a success only when the `wrote` line arrived. A cut stream, a directory at PATH
# and a signal (HUP, INT, TERM, PIPE) leave nothing in place and no temp file behind.
set +e +u +x +v
set +m 2>/dev/null

nonce=$1 path=$2 size=$3 mode=$4
say() { printf '%s\n' "tether-write $nonce $*"; }

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
