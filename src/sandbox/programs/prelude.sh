# tether's prelude, before each sandbox program (src/sandbox/programs.ts): `put` and `nl`, which
# every program writes its lines with, `read_nonce`, which the helper check and the writer take
# their nonce with, and tether_safe_path, the directories of PATH this uid
# cannot write, in PATH's order. The programs run their tools (grep,
# tr, cut, sha256sum, sleep…) by name: from a directory a session member can write (a
# ~/.local/bin or a user-owned /usr/local/bin ahead of the system's), its own grep would blind
# the sweep and its own sha256sum pass a forged helper (docs/sandbox.md, "What escapes this").
# A uid that can write every directory of PATH (root) keeps PATH: it could replace the system's
# tools as well. Globbing is off while PATH is split, as a directory name may hold a `*`.
set +e +u +a
tether_safe_path=
set -f
IFS=:
for tether_dir in $PATH; do
  [ -n "$tether_dir" ] && [ -d "$tether_dir" ] && [ ! -w "$tether_dir" ] &&
    tether_safe_path=$tether_safe_path${tether_safe_path:+:}$tether_dir
done
unset IFS tether_dir
set +f
[ -n "$tether_safe_path" ] || tether_safe_path=$PATH

# put TEXT: writes TEXT with a builtin, so that no external command's argv holds it (the lines
# carry the nonce): `printf` where it is one (dash, bash, busybox), else mksh's `print` (Debian's
# mksh has no `printf` builtin); only a shell with neither runs an external `printf`. Both report
# a write that failed (EAGAIN) with a non-zero status.
case $(command -v printf) in
  printf) put() { printf '%s' "$1"; } ;;
  *)
    if [ "$(command -v print)" = print ]; then
      put() { print -rn -- "$1"; }
    else
      put() { printf '%s' "$1"; }
    fi ;;
esac
nl='
'

# read_nonce WHO: the nonce line from stdin into `nonce`: 32 hex digits, or WHO says on stderr
# that there is none and the program exits 3. `read` takes one byte at a time from a pipe: what
# follows the line (the writer's bytes) stays on stdin.
read_nonce() {
  unset nonce
  IFS= read -r nonce
  case $nonce in
    *[!0-9a-f]* | '') nonce=x ;;
  esac
  if [ ${#nonce} -ne 32 ]; then
    echo "$1: no nonce on stdin (is the exec channel's stdin attached? docker exec needs -i)" >&2
    exit 3
  fi
}
