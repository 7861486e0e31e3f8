# tether helper check (docs/sandbox.md, "The pushed helper"; src/sandbox/helper-push.ts).
#   sh -c "$PROGRAM" tether-helper-check DIR MACHINE SHA256 [MACHINE SHA256 …]   (stdin: NONCE\n)
# Says whether the prebuilt helper for this target's `uname -m` is at DIR/helper-SHA256, checked
# here, in the target: DIR made 0700, owned by this uid, not a link; the file a regular file of
# this uid whose sha256 is SHA256, executable. Reads nothing else and writes nothing but DIR, its
# mode, the file's mode, and the removal of a link or special file at the file's name. Each line:
#   tether-helper NONCE arch M               first: what `uname -m` said
#   tether-helper NONCE none M               no prebuilt helper for M
#   tether-helper NONCE read-only|noexec MP  the file system at MP (a mount point) cannot hold it
#   tether-helper NONCE no-sha256sum         nothing here can check the file
#   tether-helper NONCE unsafe-dir WHY       DIR is a link, not this uid's, or its mode cannot be set
#   tether-helper NONCE unwritable DIR       DIR cannot be made or written
#   tether-helper NONCE directory FILE       a directory at the file's name: left alone
#   tether-helper NONCE absent FILE          not there: push it
#   tether-helper NONCE mismatch FILE WHAT   there, not the helper (WHAT: its sha256, or what it
#                                            was — a link or special file, removed): replace it
#   tether-helper NONCE match FILE           there, the helper, executable: use it
#   tether-helper NONCE done                 last: the check ran to its end
# The nonce (32 hex digits) travels on stdin, never in argv: another process of the target can
# read this program's cmdline and write to its stdout.
set +e +u +x +v +a
set +m 2>/dev/null
# Its tools (sha256sum above all) from directories this uid cannot write (prelude.sh).
PATH=$tether_safe_path

unset nonce
IFS= read -r nonce
case $nonce in
  *[!0-9a-f]* | '') nonce=x ;;
esac
if [ ${#nonce} -ne 32 ]; then
  echo "tether-helper: no nonce on stdin (is the exec channel's stdin attached? docker exec needs -i)" >&2
  exit 3
fi
# put and nl: the prelude's (prelude.sh).
say() { put "tether-helper $nonce $*$nl"; }
# finish WORD ARGS…: the answer, then the proof that the check ran to its end.
finish() {
  say "$@"
  say done
  exit 0
}

dir=$1
shift
machine=$(uname -m 2>/dev/null)
say arch "$machine"
hash=
while [ $# -ge 2 ]; do
  [ "$1" = "$machine" ] && hash=$2
  shift 2
done
[ -n "$hash" ] || finish none "$machine"
file=$dir/helper-$hash

# The mount that holds DIR (the longest mount point that prefixes it; the last one listed when
# several are stacked there) and its options. Without /proc: unknown, and the tries below say.
mount=$(awk -v d="$dir" '
  { m = $2; if (m == "/" || d == m || index(d, m "/") == 1) if (length(m) >= best) { best = length(m); mp = m; o = $4 } }
  END { if (mp != "") print o " " mp }' /proc/self/mounts 2>/dev/null)
case ,${mount%% *}, in
  *,ro,*) finish read-only "${mount#* }" ;;
  *,noexec,*) finish noexec "${mount#* }" ;;
esac
command -v sha256sum >/dev/null 2>&1 || finish no-sha256sum

umask 077
[ -L "$dir" ] && finish unsafe-dir "$dir is a symbolic link"
mkdir -p "$dir" 2>/dev/null
[ -d "$dir" ] || finish unwritable "$dir"
[ -O "$dir" ] || finish unsafe-dir "$dir belongs to another user"
chmod 700 "$dir" 2>/dev/null || finish unsafe-dir "chmod 700 $dir failed"
[ -w "$dir" ] || finish unwritable "$dir"

if [ -d "$file" ]; then
  finish directory "$file"
elif [ -L "$file" ]; then
  rm -f "$file"
  finish mismatch "$file" symbolic-link
elif [ -e "$file" ] && [ ! -f "$file" ]; then
  rm -f "$file"
  finish mismatch "$file" special-file
elif [ ! -e "$file" ]; then
  finish absent "$file"
fi
[ -O "$file" ] || finish mismatch "$file" another-users
got=$(sha256sum <"$file" 2>/dev/null)
got=${got%% *}
[ "$got" = "$hash" ] || finish mismatch "$file" "${got:-unreadable}"
[ -x "$file" ] || chmod 700 "$file" 2>/dev/null
# access(2) refuses X_OK on a noexec mount whatever the mode: a mount /proc did not show.
[ -x "$file" ] || finish noexec "$dir"
finish match "$file"
