# tether completion wrapper (decisions.md D13; docs/sandbox.md#the-completion-line).
# Runs a command inside a container and proves its end:
#   env TETHER_SESSION_<hex>=1 sh -c "$PROGRAM" tether-wrap run CMD [ARG…]
#   env TETHER_SESSION_<hex>=1 sh -c "$PROGRAM" tether-wrap script SIZE INTERP [ARG…]
# Its stdin begins with one line: in `run` mode the NONCE (32 hex digits), in `script` mode
# `NONCE DIRTOKEN` (two of them); what follows is the command's stdin (or the script). The nonce
# travels there and nowhere else: not in argv (/proc/PID/cmdline), not in the environment
# (/proc/PID/environ), not in a path (an fd link, a listing of /tmp) and not in the argv of an
# external command this program runs, all of which the command could read; it is read before
# the command starts and kept in an unexported variable. DIRTOKEN names the script's temp dir:
# drawn apart from the nonce, it may be seen.
# Once the nonce line is read and well-formed, before anything else, it prints on stdout
#   tether-start NONCE<newline>
# its start announcement: a client that exits without it never started the command.
# Once the command has exited, it prints on stdout, right after everything the command wrote,
#   tether-end NONCE exit STATUS<newline>
# and exits with STATUS. No newline comes first: tether finds the line wherever it starts and
# strips it, byte-exact, so output without a final newline comes back as it was.
# In `script` mode the script is stored in a private temp file and run as `INTERP [ARG…]`
# reading that file only once its size is SIZE; otherwise the wrapper prints
#   tether-end NONCE refused RECEIVED SIZE<newline>
# and runs nothing. Without a well-formed nonce line it runs nothing and prints no line.
# With `--helper PATH` before the mode (sandbox.run, docs/sandbox.md "An agent session under the
# pushed helper"), the command runs as the payload of the subreaper helper at PATH, pushed and
# checked by pushHelper: the helper is this program's child and the command's parent, carries the
# tag, and every process the command orphans is reparented to it. It outlives this program and
# holds them until a sweep's TERM reaches it (then it ends its subtree itself). A helper that
# cannot start the command: the command runs as without it, and stderr says so.
# The helper is checked at exec, not before: its file is opened on fd 9 (the inode is pinned),
# hashed there against the sha256 its name gives (PATH ends in helper-<sha256>), and run as
# /proc/$$/fd/9 — a file renamed over PATH meanwhile is not what runs; one that does not hash
# to its name is never run (the command then runs without the helper, stderr says so).
# In `run` mode under the helper this program never holds the nonce (docs/sandbox.md, "The
# helper holds the nonce"): the helper — non-dumpable, so that no process of the session's uid
# without CAP_SYS_PTRACE can read or trace it — reads the nonce line itself and prints
#   tether-start NONCE helper<newline>   and, after the command,   tether-end NONCE exit STATUS<newline>
# It reads it only once this program has checked that the bytes it runs are the ones hashed: a
# holder exec'd from fd 9 whose exe link hashes to the name and is fd 9's inode keeps the kernel
# refusing every write to it (ETXTBSY) from that check until the helper's exec from it is done
# (prelude.sh, hold_pinned and still_held). Until then this program may still fall back to
# proving the end itself. Then it execs
# the helper's --await mode from fd 9 (the same pid: the stream stays open until the command's
# end), which is non-dumpable before it says `checked` to the helper: from the command's start on,
# no session process outside the helper's subtree can be traced or read (docs/sandbox.md, "No
# dumpable wrapper").

# Job control would put the command in a group of its own and errexit would end the wrapper
# before its line; either may come from the environment. So may nounset and tracing.
# Allexport would export the nonce to the command.
set +e +u +x +v +a
set +m 2>/dev/null

EXIT_REFUSED=125
# A variable of that name in the environment is exported: assigning to it would hand the
# nonce to the command. Unset first, the variables then made are the shell's own.
unset nonce text first token helper fifo started hword sum hpid how flag why hgrace hkill cgdir cgstart taghex hold_pid hold_start hold_said unchecked
helper=
unchecked=
hgrace=5000
hkill=3000
taghex=
if [ "$1" = --helper ]; then
  helper=$2
  shift 2
  # `--tag HEX`: the session tag's 32 hex digits, which name the command's cgroup (helper_cgroup).
  if [ "$1" = --tag ]; then
    case $2 in *[!0-9a-f]* | '') ;; *) [ ${#2} -ne 32 ] || taghex=$2 ;; esac
    shift 2
  fi
  # `--switch GRACE KILL` (ms): the helper's own dead man's switch, which the session's sweep
  # must never be cut short by (exec.ts, helperSwitch).
  if [ "$1" = --switch ]; then
    case $2$3 in
      *[!0-9]* | '') ;;
      *) hgrace=$2 hkill=$3 ;;
    esac
    shift 3
  fi
  # `--unchecked`: no check of this session's found the helper at PATH (tether knew it from an
  # earlier session through the same channel: session-helper.ts). A helper that cannot be pinned
  # or held here is then not a fallback but a refusal: nothing read, nothing run (unchecked_refusal).
  if [ "$1" = --unchecked ]; then
    unchecked=1
    shift
  fi
fi
mode=$1
shift

# The wrapper outlives HUP, INT and TERM: it waits on for the command and still prints its line.
# (Handled, not ignored: an ignored signal would be inherited ignored by the command.)
caught=
trap 'caught=1' HUP INT TERM

# put TEXT: the prelude's (prelude.sh): a builtin writes it, so no external argv holds the nonce.

# say TEXT: writes TEXT, retried while a stdout the command left non-blocking is full
# (EAGAIN). One put of one string: one write(2), atomic on a pipe.
say() {
  text=$1
  tries=0
  until put "$text" 2>/dev/null; do
    tries=$((tries + 1))
    [ $tries -lt 1200 ] || return 1
    sleep 0.05 2>/dev/null || sleep 1
  done
}

# line FIELDS…: prints the completion line.
line() {
  say "tether-end $nonce $*$nl"
}

# take_nonce: this program's own proof (no helper, or the helper refused before it was given the
# nonce). `read` takes one byte at a time from a pipe, so the command's stdin starts right after it.
take_nonce() {
  IFS= read -r first <&3
  nonce=${first%% *}
  token=
  [ "$nonce" = "$first" ] || token=${first#* }
  case $nonce in
    *[!0-9a-f]* | '')
      echo "tether-wrap: no nonce on stdin (is the exec channel's stdin attached? docker exec needs -i)" >&2
      exit $EXIT_REFUSED ;;
  esac
  if [ ${#nonce} -ne 32 ]; then
    echo "tether-wrap: a malformed nonce on stdin" >&2
    exit $EXIT_REFUSED
  fi
  first=
  # The temp dir's name: its own 32 hex digits, never the nonce (the name shows in the command's
  # fd links, in listings, in the argv of mkdir and rm).
  if [ "$mode" = script ]; then
    case $token in
      *[!0-9a-f]* | '') token=x ;;
    esac
    if [ ${#token} -ne 32 ]; then
      echo "tether-wrap: a malformed temp dir token on stdin (script mode)" >&2
      exit $EXIT_REFUSED
    fi
  fi
}

# The command leads its own POSIX session where setsid exists, so that its own `kill 0` reaches
# its processes and not the wrapper. Started asynchronously, it is not a group leader: setsid
# then needs no fork, and $! is the command itself.
runner=
command -v setsid >/dev/null 2>&1 && runner=setsid

# pin_helper: opens the helper's file on fd 9 and hashes that open file. From here the inode on
# fd 9 is what runs (as /proc/$$/fd/9), whatever is renamed over the path. False, said on stderr,
# when it cannot be opened or does not hash to its name: it is never run.
pin_helper() {
  if ! { command exec 9<"$helper"; } 2>/dev/null; then
    why="cannot be opened:"
    return 1
  fi
  hashes_to_name "$helper" && return 0
  exec 9<&-
  why="does not hash to its name (${sum:-no sha256sum}): refused, never run;"
  return 1
}

# fall_back: says on stderr that the helper, `why` (ending in its separator), is not used: the
# command runs on the env tag alone. Under `--unchecked`, before the nonce is read, refuses
# instead (unchecked_refusal).
fall_back() {
  unchecked_refusal
  echo "tether-wrap: the helper $helper $why the command runs on the env tag alone" >&2
}

# unchecked_refusal: under `--unchecked`, the line tether retries on (exec.ts, HelperUnchecked):
# the helper is not there as it was, so it is checked (and pushed again) before the command runs.
# Exits 125 before anything of stdin is read: nothing ran, no start line.
unchecked_refusal() {
  [ -n "$unchecked" ] || return 0
  echo "tether-wrap: helper-unchecked: the helper $helper ${why%[:;]}: nothing ran" >&2
  exit $EXIT_REFUSED
}

# helper_cgroup: sets cgdir to a cgroup made for the helper's payload, below this program's own
# cgroup (the prelude's own_cgroup), where the container's cgroup v2 can be written
# (docs/sandbox.md, "A cgroup in the container"); empty otherwise — read-only (Docker's and
# Kubernetes' default), no cgroup2 mount, a v1-only host — and the command runs under the helper
# without one. Its name, tether-helper.HEX.PID.START, holds the session's tag (HEX, `--tag`:
# the sweep finds the session's cgroups by it) and this program's pid and start time: a name no
# other wrapper had, made with mkdir, which fails on a name that exists. No tag: no cgroup.
helper_cgroup() {
  cgdir=
  [ -n "$taghex" ] || return 0
  own_cgroup || return 0
  # This program's start time (field 22 of its stat, after the last `)`) beside its pid.
  cgstart=
  read_stat "$$" && cgstart=$st_start
  case $cgstart in '' | *[!0-9]*) return 0 ;; esac
  # Moving the command there takes writing this program's own cgroup.procs (the common
  # ancestor's) as well as the new one's: a uid that can mkdir here but not move there would
  # have its command never run (exec-failed cgroup; found by a break attempt).
  [ -w "$own_cg/cgroup.procs" ] || return 0
  cgdir=$own_cg/tether-helper.$taghex.$$.$cgstart
  if ! mkdir "$cgdir" 2>/dev/null || ! [ -w "$cgdir/cgroup.procs" ]; then
    rmdir "$cgdir" 2>/dev/null
    cgdir=
  fi
}

# start_helper wrap|plain CMD…: the helper starts `$runner CMD…` as its payload (its child; the
# helper's wire protocol is docs/containment.md's), run from the pinned inode. Its status pipe
# (fd 3) and control pipe (fd 4) are FIFOs in the helper's own directory (0700, this uid's),
# removed once the helper has said its first line (both are open then: removed sooner, `4<>`
# would create a plain file). `plain`: `go` waits in the control FIFO before the helper starts;
# `wrap`: `checked` and `go` are written once it is known to run the hashed bytes. The helper opens that FIFO
# read-write, so it never reads EOF there: it never runs its dead man's switch for this
# program's end, which is not the session's — a sweep's TERM is (docs/sandbox.md). False when
# the FIFOs cannot be made.
start_helper() {
  how=$1
  shift
  fifo=${helper%/*}/wrap.$$
  # What an earlier process of this pid left (a link too) goes first; usually nothing: no rm.
  if [ -e "$fifo.c" ] || [ -e "$fifo.s" ] || [ -L "$fifo.c" ] || [ -L "$fifo.s" ]; then
    rm -f "$fifo.c" "$fifo.s" 2>/dev/null
  fi
  if ! mkfifo -m 600 "$fifo.c" "$fifo.s" 2>/dev/null; then
    rm -f "$fifo.c" "$fifo.s" 2>/dev/null
    echo "tether-wrap: no FIFO for the helper in ${helper%/*}: the command runs on the env tag alone" >&2
    return 1
  fi
  # Held open until the helper has opened it too: a FIFO no one holds loses what waits in it.
  exec 8<>"$fifo.c"
  flag=
  # The cgroup in `run` mode only, whose helper removes it with its subtree (helper.c).
  cgdir=
  if [ "$how" = wrap ]; then
    flag=--wrap
    helper_cgroup
  else
    put "go$nl" >&8
  fi
  # fd 3 is the command's stdin until `<&3`, then the status FIFO (opened first: this program's
  # open below waits for it, and a helper that fails later closes it: EOF, never a hang).
  "/proc/$$/fd/9" $flag --name "$helper" --grace "$hgrace" --kill-after "$hkill" ${cgdir:+--cgroup "$cgdir"} -- $runner "$@" <&3 3>"$fifo.s" 4<>"$fifo.c" 8<&- 9<&- &
  hpid=$!
  exec 7<"$fifo.s"
}

# next_status: reads one status line of the helper into hword, a, b (again after a handled
# signal). False at EOF: the helper is gone.
next_status() {
  while :; do
    caught=
    hword=
    IFS=' ' read -r hword a b rest <&7 && return 0
    [ -n "$caught" ] || return 1
  done
}

# await_helper: reads the helper's status lines until the payload's exit (sets status) or EOF
# (the helper is gone: status stays empty). `started` once it said so: past it, the command may
# have run.
await_helper() {
  while next_status; do
    case $hword in
      helper | started)
        # The helper has both FIFOs open: our hold and their names are no longer needed.
        exec 8>&-
        rm -f "$fifo.c" "$fifo.s"
        [ "$hword" = started ] && started=1 ;;
      exit)
        # The FIFO is open to any process of this uid (/proc/$$/fd/7): what it says is data, never
        # code. bash and mksh evaluate a variable's text inside $((…)) as an expression — a
        # `b` of `a[$(cmd)]` ran cmd here, outside the helper — so only 1 to 3 digits are read.
        case $b in
          '' | *[!0-9]* | ????*) a=unknown ;;
        esac
        case $a in
          code) status=$b ;;
          signal) status=$((128 + b)) ;;
          *) status=125 ;;
        esac
        break ;;
    esac
  done
  exec 7<&- 8>&-
  rm -f "$fifo.c" "$fifo.s"
}

# wrap_under_helper CMD…: `run` mode under the helper, which holds the nonce and prints both
# lines; this program becomes the helper's --await mode, which exits with the command's status.
# Returns only while the helper has not been given the nonce (`checked` unsent): it could not be
# pinned, held, started or checked — the caller then proves the end itself. The helper's first
# line (`helper PID START`) says it has been exec'd; the holder, alive with its identity since the
# check of what it runs, says no write reached the file before. Otherwise that process is KILLed
# (our child).
wrap_under_helper() {
  pin_helper || { fall_back; return 0; }
  # The holder keeps the pinned inode unwritable from the check of what it runs until the helper
  # has been exec'd from it (the prelude's hold_pinned, still_held): the helper, non-dumpable
  # from its first instruction, shows no one its exe link, so it is checked through the holder.
  if ! hold_pinned "$helper"; then
    exec 9<&-
    why="$why: refused, never run;"
    fall_back
    return 0
  fi
  start_helper wrap "$@" || { end_hold; exec 9<&-; return 0; }
  why=
  if ! next_status || [ "$hword" != helper ]; then
    why="did not start (${hword:-no status line}${a:+ $a}${b:+ $b})"
  elif ! still_held; then
    # Its first line says the exec is done; the holder alive all along says no write reached the
    # inode before it (a file made a script around the exec, or rewritten, once nothing held it).
    why="was not held unwritable until its exec (its holder was killed)"
  fi
  end_hold
  if [ -n "$why" ]; then
    kill -KILL "$hpid" 2>/dev/null
    wait "$hpid" 2>/dev/null
    [ -z "$cgdir" ] || rmdir "$cgdir" 2>/dev/null
    exec 7<&- 8>&- 9<&-
    rm -f "$fifo.c" "$fifo.s"
    echo "tether-wrap: the helper $helper $why: the command runs on the env tag alone" >&2
    return 0
  fi
  rm -f "$fifo.c" "$fifo.s"
  # This shell is the one session process outside the helper's subtree, and dumpable: a process
  # of its uid could trace it and make it start what no helper holds. So its last step is the
  # helper itself, from the same pinned inode (which the helper runs: no write can reach it while
  # it does),
  # in --await mode — non-dumpable first, it says `checked` and `go` on the control FIFO and exits
  # with the command's status from the status FIFO (helper.c, "await mode"). The nonce is the
  # helper's from here: no fallback. A shell's exec that fails exits (127): the helper, never
  # told `checked`, never reads the nonce and runs nothing. The FIFOs go as fds 5 and 6, given on
  # the command itself: mksh opens the files of `exec N<` close-on-exec.
  # Nothing of the stream's stdin goes with it (the helper reads the nonce from its own copy): a
  # process of the uid that KILLed the helper and rewrote its file once nothing executed it would
  # have its own bytes exec'd here, and they must find no nonce to print a line with.
  exec "/proc/$$/fd/9" --await "$hpid" "$helper" 5<&7 6>&8 0</dev/null 3<&-
}

# An asynchronous command's stdin is /dev/null when job control is off: keep ours on fd 3 (the
# helper's or take_nonce's nonce line first, then the command's stdin).
exec 3<&0
[ -n "$helper" ] && [ "$mode" = run ] && wrap_under_helper "$@"

# The start announcement, before the command (or its script) is taken in: tether tells a client
# that failed before it (no such container, its own usage error) from a stream cut later.
# Unsaid (stdout gone), the command is not run: a client that then fails is read as never started.
take_nonce
say "tether-start $nonce$nl" || exit 1
# Past the nonce a refusal would leave a started command unended: the helper's faults fall back.
unchecked=

dir=
if [ "$mode" = script ]; then
  size=$1
  shift
  umask 077
  dir=${TMPDIR:-/tmp}/tether-script.$$.$token
  if ! mkdir "$dir" 2>/dev/null; then
    line refused 0 "$size"
    exit $EXIT_REFUSED
  fi
  cat >"$dir/script" <&3
  received=$(($(wc -c <"$dir/script")))
  if [ "$received" != "$size" ]; then
    # A cut stream: running the part that arrived could do half of what was asked.
    rm -rf "$dir"
    line refused "$received" "$size"
    exit $EXIT_REFUSED
  fi
  exec 3<"$dir/script"
fi

# Script mode under the helper: the helper is the command's subreaper, and this program proves
# the end (the helper does not store scripts): the result says the proof rests on this shell.
status=
started=
if [ -n "$helper" ] && [ "$mode" = script ] && { pin_helper || { fall_back; false; }; } && start_helper plain "$@"; then
  # fd 9 stays open until the helper has said a line: its exec reads /proc/$$/fd/9.
  await_helper
  if [ -z "$status" ] && [ -n "$started" ]; then
    # The helper is gone without the payload's status (killed): the command may still run. No
    # line: an unknown end, which tether sweeps.
    echo "tether-wrap: the helper $helper ended without the command's status" >&2
    [ -z "$dir" ] || rm -rf "$dir"
    exit $EXIT_REFUSED
  fi
  [ -n "$status" ] || echo "tether-wrap: the helper $helper did not start the command: it runs on the env tag alone" >&2
fi
exec 9<&-

if [ -z "$status" ]; then
  $runner "$@" <&3 3<&- &
  pid=$!
  exec 3<&-
  # A handled signal ends `wait` early (status > 128): wait again until the command has ended.
  while :; do
    caught=
    wait "$pid"
    status=$?
    [ -n "$caught" ] || break
  done
fi
exec 3<&-
[ -z "$dir" ] || rm -rf "$dir"
line exit "$status"
exit "$status"
