# tether's prelude, before each sandbox program (src/sandbox/programs.ts): `put` and `nl`, which
# every program writes its lines with, `read_nonce`, which the helper check and the writer take
# their nonce with, `read_stat`, which reads a process's stat, `hashes_to_name` and `hold_pinned`,
# which check the pinned helper, `own_cgroup`, where the wrapper and the sweep find the session's
# cgroups, and tether_safe_path, the directories of PATH this uid cannot write, in PATH's order.
# The programs run their tools (grep,
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
# a write that failed (EAGAIN) with a non-zero status. A builtin is told from a program without
# a fork: `command -v` with a PATH that names no directory there is (an empty PATH would be the
# working directory) finds builtins and functions only.
tether_path=$PATH
PATH=/nonexistent/tether/builtins-only
if command -v printf >/dev/null 2>&1; then
  put() { printf '%s' "$1"; }
elif command -v print >/dev/null 2>&1; then
  put() { print -rn -- "$1"; }
else
  put() { printf '%s' "$1"; }
fi
PATH=$tether_path
unset tether_path
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

# read_stat PID: sets st_state st_ppid st_threads st_start st_comm; false when gone.
# The whole file, every line of it: comm (prctl(PR_SET_NAME), /proc/self/comm) may hold
# newlines, spaces and parentheses, so the fields are read after the LAST ')' of the file — a
# name such as `x) S 77 ` followed by a newline is text of comm, never a parent or a state.
read_stat() {
  st_line= st_part=
  while IFS= read -r st_part; do st_line=$st_line$st_part$nl; st_part=; done 2>/dev/null <"/proc/$1/stat"
  st_line=$st_line$st_part
  [ -n "$st_line" ] || return 1
  st_comm=${st_line#*\(}
  st_comm=${st_comm%\)*}
  set -- ${st_line##*\)}
  st_state=$1 st_ppid=$2 st_threads=${18} st_start=${20}
  # A zombie with no live thread is dead: it cannot act on a signal.
  [ "$st_state" != Z ] || [ "${st_threads:-0}" -gt 1 ]
}

# hashes_to_name PATH [FILE]: FILE (default the open file on fd 9, /proc/$$/fd/9) hashes to the
# sha256 that PATH's name gives (helper-<sha256>); sets `sum`. sha256sum from the directories this
# uid cannot write, reading the inode through FILE, not PATH.
hashes_to_name() {
  sum=$(PATH=$tether_safe_path; sha256sum "${2:-/proc/$$/fd/9}" 2>/dev/null)
  sum=${sum%% *}
  [ -n "$sum" ] && [ "$sum" = "${1##*/helper-}" ]
}

# hold_pinned PATH: starts a holder (`--sweep-hold`) from the inode pinned on fd 9 and checks what
# it executes: its exe link (/proc/H/exe: the ELF it runs; for a `#!` script, the interpreter)
# hashes to PATH's name and is fd 9's inode (`-ef`: same device and inode). The holder's code
# never execs anything else, so from then on, while it runs, the kernel refuses every write to
# that inode (ETXTBSY): what is exec'd from fd 9 is what was hashed. Sets hold_pid and hold_start
# (its identity); false, with `why` set and the holder ended, when it did not say it ran (SIGUSR1,
# every 10 ms until it is heard: `wait` ends early on a trapped signal) or runs something else.
# USR1 stays ignored until end_hold. A file made a script around a holder's exec gives the kernel
# no write hold on it (found by a break attempt): its holder runs the interpreter, refused here.
hold_pinned() {
  hold_said=
  trap 'hold_said=1' USR1
  "/proc/$$/fd/9" --sweep-hold </dev/null >/dev/null 2>&1 &
  hold_pid=$!
  while [ -z "$hold_said" ]; do
    wait "$hold_pid" 2>/dev/null
    [ -n "$hold_said" ] && break
    kill -0 "$hold_pid" 2>/dev/null && continue
    trap - USR1
    why="did not start its holder"
    return 1
  done
  trap '' USR1
  hold_start=
  read_stat "$hold_pid" && hold_start=$st_start
  if [ -z "$hold_start" ] || ! hashes_to_name "$1" "/proc/$hold_pid/exe" ||
    ! [ "/proc/$hold_pid/exe" -ef "/proc/$$/fd/9" ]; then
    end_hold
    why="does not hash to its name after its exec, as what its holder runs (/proc/$hold_pid/exe: ${sum:-unreadable})"
    return 1
  fi
}

# execd_held PID: PID, started from fd 9 after hold_pinned, is past its exec — its name is `9`,
# which only the exec gives it (a fork of this shell bears the shell's) — or has ended (a zombie,
# or gone: a shell may reap it early), and the holder is still_held then: that covers PID's whole
# life, exec included, so the bytes it runs are the ones hashed. False also for one still before
# its exec after 100000 looks (stopped there, by any process of the uid): past this point its
# exec would no longer be held (found by a break attempt).
execd_held() {
  tether_tries=0
  while :; do
    st_line= st_comm= st_state=
    read_stat "$1"
    if [ "$st_comm" = 9 ] || [ "$st_state" = Z ] || [ -z "$st_line" ]; then
      still_held
      return
    fi
    tether_tries=$((tether_tries + 1))
    [ $tether_tries -lt 100000 ] || return 1
  done
}

# still_held: the holder runs still, with its identity, not a zombie, executing fd 9's inode — it
# was alive all along, so no write reached the inode since hold_pinned. Killed, it is a zombie
# or, reaped (bash reaps from its SIGCHLD handler), gone: its start time then names no process.
still_held() {
  read_stat "$hold_pid" && [ "$st_start" = "$hold_start" ] && [ "$st_state" != Z ] &&
    [ "/proc/$hold_pid/exe" -ef "/proc/$$/fd/9" ]
}

# end_hold: ends the holder; USR1 back to its default.
end_hold() {
  kill -KILL "$hold_pid" 2>/dev/null
  wait "$hold_pid" 2>/dev/null
  trap - USR1
}

# own_cgroup: sets own_cg to the directory of this program's cgroup v2 (`0::PATH` in
# /proc/$$/cgroup, below the cgroup2 mount whose root is a prefix of PATH: fields 4 and 5 of
# /proc/$$/mountinfo); false, own_cg empty, without one — no cgroup2 mount, a v1-only host, a
# mount point with an escaped character, a PATH with a blank (it would be split as an argument).
# The wrapper makes its command's cgroup there; the sweep looks there for the session's.
own_cgroup() {
  own_cg=
  tether_cg=
  while IFS= read -r tether_line; do
    case $tether_line in 0::/*) tether_cg=${tether_line#0::} ;; esac
  done <"/proc/$$/cgroup" 2>/dev/null
  case $tether_cg in '' | *' '* | *'	'*) return 1 ;; esac
  while read -r _ _ _ tether_root tether_mount tether_rest; do
    case " $tether_rest " in *" - cgroup2 "*) ;; *) continue ;; esac
    case $tether_root$tether_mount in *\\*) continue ;; esac
    # PATH below the mount's root: the rest, empty or from a slash on. (No `case` pattern with an
    # empty quoted prefix: bash matches nothing then.)
    tether_prefix=${tether_root%/}
    tether_rel=${tether_cg#"$tether_prefix"}
    [ -z "$tether_prefix" ] || [ "$tether_rel" != "$tether_cg" ] || continue
    case $tether_rel in '' | /*) ;; *) continue ;; esac
    own_cg=${tether_mount%/}$tether_rel
    own_cg=${own_cg%/}
    [ -n "$own_cg" ]
    return
  done <"/proc/$$/mountinfo" 2>/dev/null
  return 1
}
