# tether's prelude, before each sandbox program (src/sandbox/programs.ts): tether_safe_path, the
# directories of PATH this uid cannot write, in PATH's order. The programs run their tools (grep,
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
