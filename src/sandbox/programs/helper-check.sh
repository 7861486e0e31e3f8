# tether helper check (docs/sandbox.md, "The pushed helper"; src/sandbox/helper-push.ts).
#   sh -c "$PROGRAM" tether-helper-check DIR FALLBACK MACHINE SHA256 [MACHINE SHA256 …]   (stdin: NONCE\n)
# Says whether the prebuilt helper for this target's `uname -m` is at DIR/helper-SHA256, checked
# here, in the target: DIR made 0700, owned by this uid, not a link; the file a regular file of
# this uid whose sha256 is SHA256, executable. FALLBACK `-`: DIR or nothing. Else a DIR that
# cannot be that (another uid made it first: /tmp is anyone's) gives way to FALLBACK<uid>, this
# uid's own (`id -u`), checked the same way. Reads nothing else and writes nothing but the
# directory, its mode, the file's mode, and the removal of a link or special file at the file's
# name. Each line:
#   tether-helper NONCE arch M               first: what `uname -m` said
#   tether-helper NONCE none M               no prebuilt helper for M
#   tether-helper NONCE read-only|noexec MP  the file system at MP (a mount point) cannot hold it
#   tether-helper NONCE no-sha256sum         nothing here can check the file
#   tether-helper NONCE fallback D WHY       DIR cannot be used (WHY), D (FALLBACK<uid>) is: the
#                                            file below is in D
#   tether-helper NONCE unsafe-dir WHY       DIR (and D) is a link, not this uid's, or its mode
#                                            cannot be made 0700
#   tether-helper NONCE unwritable WHY       DIR (and D) cannot be made or written
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

# read_nonce, put and nl: the prelude's (prelude.sh).
read_nonce tether-helper
say() { put "tether-helper $nonce $*$nl"; }
# finish WORD ARGS…: the answer, then the proof that the check ran to its end.
finish() {
  say "$@"
  say done
  exit 0
}

dir=$1 fallback=$2
shift 2
machine=$(uname -m 2>/dev/null)
say arch "$machine"
hash=
while [ $# -ge 2 ]; do
  [ "$1" = "$machine" ] && hash=$2
  shift 2
done
[ -n "$hash" ] || finish none "$machine"

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
# settle D: D is made, or found, this uid's directory of mode 0700 (an ACL's entries masked by it),
# not a link; else word and why say what it is. A link made between the looks is seen by the last.
settle() {
  [ -L "$1" ] && { word=unsafe-dir why="$1 is a symbolic link"; return 1; }
  mkdir -p "$1" 2>/dev/null
  [ -d "$1" ] || { word=unwritable why="$1 cannot be made or written"; return 1; }
  [ -O "$1" ] || { word=unsafe-dir why="$1 belongs to another user"; return 1; }
  chmod 700 "$1" 2>/dev/null || { word=unsafe-dir why="chmod 700 $1 failed"; return 1; }
  # A file system that ignores chmod (vfat's quiet, a mode fixed by its mount) keeps it open.
  case $(ls -ld "$1" 2>/dev/null) in
    drwx------*) ;;
    *) word=unsafe-dir why="$1 stays group or world accessible after chmod 700"; return 1 ;;
  esac
  [ -L "$1" ] && { word=unsafe-dir why="$1 is a symbolic link"; return 1; }
  [ -w "$1" ] || { word=unwritable why="$1 cannot be made or written"; return 1; }
  return 0
}
if ! settle "$dir"; then
  [ "$fallback" = - ] && finish "$word" "$why"
  first=$why
  uid=$(id -u 2>/dev/null)
  case $uid in
    '' | *[!0-9]*) finish "$word" "$first; no per-uid directory: id -u said ${uid:-nothing}" ;;
  esac
  settle "$fallback$uid" || finish "$word" "$first; the per-uid $why"
  dir=$fallback$uid
  say fallback "$dir" "$first"
fi
file=$dir/helper-$hash

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
