# tether sweep program (decisions.md D12; docs/sandbox.md#the-sweep-program).
# The local sweep (src/sweep/loop.ts) in POSIX sh, run inside a container through ONE exec:
#   sh -c "$PROGRAM" tether-sweep TAG GRACE_MS KILL_AFTER_MS INTERVAL_MS [[member:|ended:]PID:START…]
#   (stdin: NONCE\n)
# Each round: take a snapshot of /proc; the session is the carriers of TAG=1 (read with
# `grep -z`, or `tr` where grep cannot read NUL records), the earlier finds still alive with the
# same identity (pid + start time, field 22 of stat) and every descendant of either. TERM once
# to each, SIGCONT after the TERM of a stopped one, a scan every INTERVAL_MS until two scans in a
# row see nothing or GRACE_MS is over; then KILL the same way for up to KILL_AFTER_MS.
# ended:PID:START names a helper whose end line said `childless` (it exited then, with nothing
# below it): a member while it runs, and a scan that finds it gone and nothing else (with the
# PID:START helpers childless) ends the phase as `helper-childless` too.
# PID:START and member:PID:START name the session's helpers, as their start lines gave them to
# tether: each is a member while a process of that pid has that start time (found `given`, with
# every descendant), when it has this program's uid and its environ holds the tag or cannot be
# read — a non-dumpable helper's cannot, without CAP_SYS_PTRACE (named_ok). PID:START also gives the helper's word: a scan that finds none but those
# helpers, each childless by the kernel's children lists, ends the phase at once
# (`helper-childless`) once they are gone (docs/sandbox.md, "The helper's proof").
# The session's cgroups — tether-helper.HEX.PID.START below this program's own cgroup, HEX the
# tag's, made by the completion wrapper for each command under the helper where cgroup v2 can be
# written — hold members too: every process in one (found `cgroup`, with every descendant), a
# helper KILLed before the sweep leaving what it held there, env-cleared or not. At the end each
# is removed once empty (docs/sandbox.md, "A cgroup in the container").
# Never signalled: a pid <= 1 (the container's init), a process group (no negative pid ever
# reaches kill), this program, its ancestors and its own children.
# Output: one record per line (docs/sandbox.md#sweep-output); the last line,
#   done TAG SCANS DURATION_MS COMPLETE LINES NONCE
# proves the program ran to its end. NONCE (32 hex digits) is the first line of stdin, as the
# completion wrapper's is: any process of the container that can open this program's stdout
# (/proc/PID/fd/1 of a pipe) can write lines into it, but none can write a `done` that counts
# the LINES before it and holds the nonce, which is printed nowhere else and never exported.
# A run without that line is an error, never "found nothing".

# Job control, errexit, nounset and tracing may come from the environment: each would change
# what follows; allexport would export the nonce to every command this program runs. A lost
# stream (SIGPIPE, SIGHUP) must not stop a sweep half-way.
set +e +u +x +v +a
trap '' PIPE HUP
# Its tools from directories this uid cannot write (the prelude: prelude.sh).
PATH=$tether_safe_path
# An inherited variable of one of these names is exported: assigning to it would hand the
# nonce (or the count) to grep, tr and sleep, whose environ any process here can read.
unset nonce first lines

# say TEXT: one record, written by the prelude's `put` (a builtin: no external command's argv
# holds a line, and the last one holds the nonce). `lines` counts the records from the header on.
lines=0
say() { put "$*$nl"; lines=$((lines + 1)); }

# ---- arguments ---------------------------------------------------------------------------
tag=$1 grace=$2 kill_after=$3 interval=$4
usage() { say "error usage $*"; exit 2; }
case $tag in TETHER_SESSION_*) ;; *) usage "tag $tag" ;; esac
hex=${tag#TETHER_SESSION_}
[ ${#hex} -eq 32 ] || usage "tag $tag"
case $hex in *[!0-9a-f]*) usage "tag $tag" ;; esac
for n in "$grace" "$kill_after" "$interval"; do
  case $n in '' | *[!0-9]*) usage "duration $n" ;; esac
done
# The session's helpers: `given` (" PID:START …", every one named) and `helpers` (those whose
# word may end a phase: the words without `member:`). PID and START digits without a leading
# zero, the pid above 1 and of at most 10 digits, START of at most 20.
identity() {
  case $1 in *[!0-9:]* | *:*:* | 0* | *:0*) return 1 ;; [2-9]:?* | [1-9]?*:?*) ;; *) return 1 ;; esac
  id_pid=${1%%:*} id_start=${1#*:}
  [ ${#id_pid} -le 10 ] && [ ${#id_start} -le 20 ]
}
helpers= given=' ' ended=
if [ $# -gt 4 ]; then
  shift 4
  for h in "$@"; do
    case $h in
      member:*) identity "${h#member:}" || usage "helper $h"; given="$given${h#member:} " ;;
      ended:*) identity "${h#ended:}" || usage "helper $h"; given="$given${h#ended:} " ended="$ended ${h#ended:}" ;;
      *) identity "$h" || usage "helper $h"; given="$given$h "; helpers="$helpers $h" ;;
    esac
  done
fi
entry=$tag=1
# The nonce, before anything is looked at: without one no answer could be told from a forgery,
# so nothing is signalled (`docker exec` without -i gives an empty stdin).
IFS= read -r first
nonce=$first
first=
case $nonce in *[!0-9a-f]* | '') nonce=x ;; esac
if [ ${#nonce} -ne 32 ]; then
  say "tether-sweep 2 no-nonce $tag"
  echo "tether-sweep: no nonce on stdin (is the exec channel's stdin attached? docker exec needs -i): nothing was signalled" >&2
  exit 125
fi
# The header comes next, before anything that could fail (a missing /dev/null included): from
# here on, the program has reached the target, and a run that stops is cut, not unreachable.
lines=0
say "tether-sweep 2 begin $tag"
set +m 2>/dev/null
# Our own children (grep, tr, sleep) must not carry the tag we look for.
unset "$tag"
# Where the session's cgroups are, if anywhere (the prelude's own_cgroup; session_cgroups).
own_cgroup || own_cg=

# ---- clock and pause ---------------------------------------------------------------------
# /proc/uptime has centiseconds: the only sub-second clock POSIX sh can read without forking.
# Without a readable /proc (no /proc, or an empty one) the clock stays where it was (0 at the
# start): the program then says NO_PROC and finishes, never dies on an empty number.
now=0
now_ms() {
  up_s=
  read -r up_s up_rest 2>/dev/null </proc/uptime
  case $up_s in
    *[!0-9.]* | '' | .* | *.) return 1 ;;
    *.*) now=$(( ${up_s%.*} * 1000 + 1${up_s#*.} * 10 - 1000 )) ;;
    *) now=$(( up_s * 1000 )) ;;
  esac
}
nap=$(( interval / 1000 )).$(( interval % 1000 / 100 ))$(( interval % 100 / 10 ))$(( interval % 10 ))
pause() {
  sleep "$nap" 2>/dev/null && return
  # A sleep without fractions (POSIX only requires integers): wait one second instead.
  [ "$nap" = 1 ] || say "warning COARSE_SLEEP sleep cannot pause $nap s here: scans are 1 s apart"
  nap=1
  sleep 1
}

# ---- one process ------------------------------------------------------------------------
# ctl: every control byte but NUL (1-31 and 127), for a bracket expression. printable TEXT sets
# `clean` to TEXT with each of them replaced by `?`: a process's name goes into one record, and a
# newline in it would make two (docs/sandbox.md#sweep-output). Should a shell's pattern not
# replace one, it stays and the parser refuses the line: an unproven sweep, never a forged record.
ctl=$(printf '\001\002\003\004\005\006\007\010\011\012\013\014\015\016\017\020\021\022\023\024\025\026\027\030\031\032\033\034\035\036\037\177.')
ctl=${ctl%.}
[ ${#ctl} -eq 32 ] || ctl=$nl
printable() {
  clean=$1
  while :; do
    case $clean in *[$ctl]*) ;; *) return ;; esac
    was=$clean
    clean=${clean%%[$ctl]*}?${clean#*[$ctl]}
    [ "$clean" != "$was" ] || return
  done
}

# helpers_childless: the kernel's word that the session holds nothing but its helpers. Each helper
# tether named still runs with the identity its start line gave (tether read it through the
# stream, after the nonce no session member has) and was found in this scan; none has a child —
# the children lists of its threads (/proc/PID/task/TID/children) are empty, and a subreaper holds
# every orphan of its subtree, so nothing of that subtree is left; and the scan found no member
# but them. Read before this round's signals. False when no helper was named or a list cannot be
# read (a kernel without it): the phase then ends on two empty scans as before.
helpers_childless() {
  [ -n "$helpers$ended" ] || return 1
  for m in $members; do
    case "$helpers " in *" ${m%:*} "*) ;; *) return 1 ;; esac
  done
  # The helpers whose end line said `childless` (ended:PID:START) exited then: one still running
  # with that identity is a member (given), and makes this false above.
  for h in $ended; do
    ! { read_stat "${h%:*}" && [ "$st_start" = "${h#*:}" ]; } || return 1
  done
  for h in $helpers; do
    case $members in *" $h:"*) ;; *) return 1 ;; esac
    for c in "/proc/${h%:*}/task/"*/children; do
      [ -r "$c" ] || return 1
      kids=
      read -r kids 2>/dev/null <"$c"
      [ -z "$kids" ] || return 1
    done
    # Still the same process once its lists were read (a pid reused meanwhile has no such start).
    read_stat "${h%:*}" && [ "$st_start" = "${h#*:}" ] || return 1
  done
}

# helpers_gone: the childless helpers, signalled this round or before (a TERM runs their dead
# man's switch, which finds no child and exits at once), are gone — looked at every 5 ms, 40
# times at most. Then nothing the scan found is alive. False when one still runs (denied, slow):
# the rounds go on.
helpers_gone() {
  tries=0
  while :; do
    left=
    for h in $helpers; do
      read_stat "${h%:*}" && [ "$st_start" = "${h#*:}" ] && left=1
    done
    if [ -z "$left" ]; then
      alive=0
      alive_ids=' '
      return 0
    fi
    tries=$((tries + 1))
    [ $tries -lt 40 ] || return 1
    sleep 0.005 2>/dev/null || return 1
  done
}

# send SIG PID: the only place a signal is sent. Digits only and > 1: never a group (a negative
# pid), never 0 or -1, never the container's init.
send() {
  case $2 in '' | *[!0-9]*) return 1 ;; esac
  [ "$2" -gt 1 ] || return 1
  kill -s "$1" "$2" 2>/dev/null
}

uid_of() {
  uid=-
  while read -r k v rest; do
    case $k in Uid:) uid=$v; return ;; esac
  done 2>/dev/null <"/proc/$1/status"
}

# ---- the environ reader ------------------------------------------------------------------
# grep -z reads NUL-separated records. Greps without it (some busybox builds, BSD) are detected
# once; then tr turns each NUL into a newline, having first turned newlines inside values into
# \001 so that a value cannot forge a record of its own.
if printf 'A=1\000%s\000' "$entry" | grep -qzxF -e "$entry" 2>/dev/null; then
  reader=grep-z
else
  reader=tr
fi
# environ_says PID: 0 when the environ of PID holds the entry, 1 when it was read and does not, 2
# when it cannot be read (a non-dumpable process's, for a reader without CAP_SYS_PTRACE: the open
# is refused; or gone).
environ_says() {
  { command exec 6<"/proc/$1/environ"; } 2>/dev/null || return 2
  if [ "$reader" = grep-z ]; then
    grep -qzxF -e "$entry" <&6 2>/dev/null
  else
    tr '\n\000' '\001\n' 2>/dev/null <&6 | grep -qxF -e "$entry"
  fi
  env_status=$?
  exec 6<&-
  [ $env_status -le 1 ] || return 2
  return $env_status
}

# named_ok PID: a process a start line named (`given`) is a member on evidence no session member
# can forge past its own reach: it has this program's uid (one a process of the session could
# signal itself), and its environ holds the tag or cannot be read — a non-dumpable helper's. One
# whose environ reads without the tag is not the session's, whatever a line said (a nonce copied
# off a stdin pipe forges a start line naming any process: docs/sandbox.md, "What escapes this").
named_ok() {
  uid_of "$1"
  [ "$uid" = "$my_uid" ] || return 1
  environ_says "$1"
  [ $? -ne 1 ]
}

# carrier_files: prints /proc/PID/task/TID/environ of every thread whose environ holds the
# entry. Every thread is read: a leader that has exited takes the process's file with it.
carrier_files() {
  if [ "$reader" = grep-z ]; then
    grep -lzxF -e "$entry" /proc/[0-9]*/task/[0-9]*/environ 2>/dev/null
  else
    for f in /proc/[0-9]*/task/[0-9]*/environ; do
      tr '\n\000' '\001\n' 2>/dev/null <"$f" | grep -qxF -e "$entry" && say "$f"
    done
  fi
}

# This program's uid: a process named by identity must have it (named_ok).
uid_of $$
my_uid=$uid

# ---- this program and its ancestors ------------------------------------------------------
procfs_ok() {
  [ -r /proc/self/stat ] || return 1
  read -r self_pid self_rest </proc/self/stat || return 1
  [ "$self_pid" = "$$" ]
}
excluded=' '
p=$$
while [ "${p:-0}" -gt 1 ] && read_stat "$p"; do
  excluded="$excluded$p "
  p=$st_ppid
done

# ---- state -------------------------------------------------------------------------------
# tracked: " PID:START " of every process found so far (the earlier finds); ntracked: how many.
# sent_PID_START: signals sent to it, e.g. "TERM CONT KILL "; denied_PID_START=1 after an EPERM.
tracked=' '
ntracked=0
scans=0
complete=1

# snapshot: table of "PID PPID START STATE" lines of every live process we may signal.
# Our own subshells and their children are left out too: a fork shows the environ this program
# was started with, which may hold the tag (a caller inside the session), until it execs.
snapshot() {
  table=
  ours=" $$ "
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" -gt 1 ] || continue
    case $excluded in *" $pid "*) continue ;; esac
    read_stat "$pid" || continue
    case $ours in *" $st_ppid "*) ours="$ours$pid "; continue ;; esac
    table="$table$pid $st_ppid $st_start $st_state
"
  done
  [ -n "$table" ] || [ -d /proc/self ]
}

# session_cgroups: sets cgroups to the directories of the session's cgroups that exist now.
cgroups=
session_cgroups() {
  cgroups=
  [ -n "$own_cg" ] || return 0
  for cg in "$own_cg"/tether-helper."$hex".*; do
    case ${cg##*/tether-helper."$hex".} in [0-9]*.[0-9]*) ;; *) continue ;; esac
    case ${cg##*/tether-helper."$hex".} in *[!0-9.]* | *.*.* | *.) continue ;; esac
    [ -d "$cg" ] && cgroups="$cgroups $cg"
  done
}

# cgroup_members DIR: adds to cgpids the processes of the session's cgroup DIR and of every cgroup
# below it (a command may make its own) whose uid is the uid that owns that cgroup's
# cgroup.procs — the session's, which made it. On cgroup v2 a process that can write a common
# ancestor's cgroup.procs can move any process into a cgroup it can write, root's too (a break
# attempt planted a root process in a cgroup of the tag's name and a root sweep KILLed it): a
# process of another uid is never taken on a cgroup's word.
cgroup_members() {
  cgtop=$1
  for cgp in $(find "$cgtop" -name cgroup.procs 2>/dev/null); do
    case $cgp in "$cgtop"/*) ;; *) continue ;; esac
    cgowner=$(ls -ln "$cgp" 2>/dev/null)
    set -- $cgowner
    cgowner=${3:-x}
    case $cgowner in *[!0-9]* | '') continue ;; esac
    while read -r pid; do
      case $pid in '' | *[!0-9]*) continue ;; esac
      uid_of "$pid"
      [ "$uid" = "$cgowner" ] && cgpids="$cgpids$pid "
    done 2>/dev/null <"$cgp"
  done
}

# A scan reads the snapshot's rows into variables keyed by pid (evals, no fork: PID, PPID and
# START are digits): sc_row_PID ("POS PPID START STATE", POS its place in the snapshot),
# sc_id_PID (a member of this scan) and sc_pass_PID (the descendants'); sw_tk_PID_START marks a
# process tracked (found before). No pass over the snapshot and no match on a string of every
# member per process found: the first scan of a session of 1000 took 37-76 s that way
# (docs/benchmarks.md §13).

# take PID PPID START STATE FOUNDBY VIA: the snapshot's process PID becomes a member; tracked
# (said) at its first sight.
take() {
  eval "sc_id_$1=1 sc_tk=\${sw_tk_$1_$3-}"
  members="$members$1:$3:$4 "
  parents="$parents$1:$2 "
  if [ -z "$sc_tk" ]; then
    read_stat "$1" && st_comm_of=$st_comm || st_comm_of=
    track "$1" "$3" "$2" "$5" "$6"
  fi
}

# take_listed FOUNDBY LIST identity|pid: every process of the snapshot in LIST (" PID:START …" by
# identity, " PID …" by pid) that is no member yet becomes one, found FOUNDBY, in the snapshot's
# order. LIST's words are marked in sc_l_PID_START (sc_l_PID_PID by pid) for the one pass.
sc_listed() {
  case $sc_how:$1 in
    identity:[0-9]*:[0-9]*) case $1 in *[!0-9:]* | *:*:*) return 1 ;; esac; sc_name=sc_l_${1%:*}_${1#*:} ;;
    pid:[0-9]*) case $1 in *[!0-9]*) return 1 ;; esac; sc_name=sc_l_$1_$1 ;;
    *) return 1 ;;
  esac
}
take_listed() {
  sc_by=$1 sc_list=$2 sc_how=$3
  for sc_key in $sc_list; do
    sc_listed "$sc_key" && eval "$sc_name=1"
  done
  IFS=$nl
  for sc_r in $table; do
    unset IFS
    set -- $sc_r
    if [ "$sc_how" = identity ]; then eval "sc_hit=\${sc_l_$1_$3-}"; else eval "sc_hit=\${sc_l_$1_$1-}"; fi
    eval "sc_in=\${sc_id_$1-}"
    [ -n "$sc_hit" ] && [ -z "$sc_in" ] || continue
    [ "$sc_by" != given ] || named_ok "$1" || continue
    take "$1" "$2" "$3" "$4" "$sc_by" -
  done
  unset IFS
  for sc_key in $sc_list; do
    sc_listed "$sc_key" && unset "$sc_name"
  done
}

# track PID START PPID FOUNDBY VIA: first sight of a member (FOUNDBY carrier, given, cgroup or
# descendant); says so with its details.
track() {
  tracked="$tracked$1:$2 "
  eval "sw_tk_$1_$2=1"
  ntracked=$((ntracked + 1))
  uid_of "$1"
  say "found $1 $2 $3 $uid $4 $5"
  printable "$st_comm_of"
  say "comm $1 $2 $clean"
  # NUL (between arguments) as a space; every other control byte as `?`, as in comm.
  cmd=$(tr '\000\001-\037\177' ' ????????????????????????????????' 2>/dev/null <"/proc/$1/cmdline")
  say "cmdline $1 $2 $cmd"
}

# scan: sets members (" PID:START:STATE ... "), parents (" PID:PPID ... ", each member's parent
# as the snapshot read it) and seen (how many): the earlier finds, the carriers, the named
# helpers, and the descendants of any of them.
scan() {
  snapshot || return 1
  scans=$((scans + 1))
  members=' '
  parents=' '
  # Every row once, by pid; the earlier finds still alive with the same identity.
  sc_pos=0
  IFS=$nl
  for sc_r in $table; do
    unset IFS
    set -- $sc_r
    sc_pos=$((sc_pos + 1))
    eval "sc_row_$1=\"\$sc_pos \$2 \$3 \$4\" sc_tk=\${sw_tk_$1_$3-}"
    [ -z "$sc_tk" ] || { members="$members$1:$3:$4 " parents="$parents$1:$2 "; eval "sc_id_$1=1"; }
  done
  unset IFS
  # Carriers.
  for f in $(carrier_files); do
    pid=${f#/proc/}
    pid=${pid%%/*}
    case $pid in '' | *[!0-9]*) continue ;; esac
    eval "sc_in=\${sc_id_$pid-} sc_r=\${sc_row_$pid-}"
    [ -z "$sc_in" ] && [ -n "$sc_r" ] || continue
    set -- $sc_r
    take "$pid" "$2" "$3" "$4" carrier -
  done
  # The helpers tether named, by identity: the process of that pid with that start time, of this
  # uid, whose environ holds the tag or cannot be read (named_ok; a pid now another process's is
  # not one).
  [ "$given" = ' ' ] || take_listed given "$given" identity
  # What the session's cgroups hold (their cgroup.procs), by pid: those of this tag, named by the
  # wrapper (wrap.sh, helper_cgroup), a PID and START of digits after it — no other cgroup is
  # read or removed.
  session_cgroups
  if [ -n "$cgroups" ]; then
    cgpids=' '
    for cg in $cgroups; do cgroup_members "$cg"; done
    take_listed cgroup "$cgpids" pid
  fi
  # Descendants of any member, by parent: what passes over the snapshot in its order, each
  # taking a process whose parent is a member by then, until one adds nothing, would take, in
  # the same order — without those passes. Pass 1 takes a process whose parent was a member
  # before; a process whose parent the passes took takes that parent's pass when it comes after
  # it in the snapshot, the next one when before (sc_pass_PID, from one walk up its parents,
  # remembered: W while on the walk, N for none — a loop, or a parent out of the snapshot). Each
  # pass's processes go into sc_bk_PASS in the snapshot's order, then are taken pass by pass.
  sc_passes=0
  IFS=$nl
  for sc_r in $table; do
    unset IFS
    sc_pid=${sc_r%% *}
    eval "sc_in=\${sc_id_$sc_pid-} sc_pass=\${sc_pass_$sc_pid-}"
    [ -z "$sc_in" ] || continue
    if [ -z "$sc_pass" ]; then
      sc_walk= p=$sc_pid
      while :; do
        eval "sc_pass_$p=W"
        sc_walk="$p $sc_walk"
        eval "set -- \$sc_row_$p"
        q=$2
        case $q in '' | *[!0-9]*) sc_pass=N; break ;; esac
        eval "sc_in=\${sc_id_$q-} sc_pass=\${sc_pass_$q-} sc_qr=\${sc_row_$q-}"
        if [ -n "$sc_in" ]; then sc_pass=1 sc_ppos=0; break; fi
        if [ -z "$sc_qr" ]; then sc_pass=N; break; fi
        if [ -n "$sc_pass" ]; then sc_ppos=${sc_qr%% *}; break; fi
        p=$q
      done
      case $sc_pass in W | N) sc_pass=N ;; esac
      for p in $sc_walk; do
        if [ "$sc_pass" != N ]; then
          eval "sc_pos=\${sc_row_$p%% *}"
          [ "$sc_ppos" -lt "$sc_pos" ] || sc_pass=$((sc_pass + 1))
          sc_ppos=$sc_pos
        fi
        eval "sc_pass_$p=\$sc_pass"
      done
      eval "sc_pass=\$sc_pass_$sc_pid"
    fi
    [ "$sc_pass" != N ] || continue
    [ "$sc_pass" -le "$sc_passes" ] || sc_passes=$sc_pass
    eval "sc_bk_$sc_pass=\"\${sc_bk_$sc_pass-} \$sc_pid\""
  done
  unset IFS
  sc_pass=1
  while [ "$sc_pass" -le "$sc_passes" ]; do
    eval "sc_bk=\${sc_bk_$sc_pass-}"
    unset "sc_bk_$sc_pass"
    for pid in $sc_bk; do
      eval "set -- \$sc_row_$pid"
      take "$pid" "$2" "$3" "$4" descendant "$2"
    done
    sc_pass=$((sc_pass + 1))
  done
  # The rows' variables go with the scan.
  IFS=$nl
  for sc_r in $table; do
    unset IFS
    sc_pid=${sc_r%% *}
    unset "sc_row_$sc_pid" "sc_id_$sc_pid" "sc_pass_$sc_pid"
  done
  unset IFS
  set -- $members
  seen=$#
}

# deliver SIG PID START STATE: SIG once per process, to the process the scan found (its start
# time checked right before). Counts it in `alive` unless it is gone.
deliver() {
  eval "sent=\${sent_$2_$3-} denied=\${denied_$2_$3-}"
  case " $sent " in *" $1 "*) alive=$((alive + 1)); alive_ids="$alive_ids$2:$3 "; return ;; esac
  if [ -n "$denied" ]; then alive=$((alive + 1)); alive_ids="$alive_ids$2:$3 "; return; fi
  read_stat "$2" && [ "$st_start" = "$3" ] || return
  if send "$1" "$2"; then
    sent="$sent$1 "
    say "signal $2 $3 $1"
    case $4 in T | t)
      if [ "$1" = TERM ] && send CONT "$2"; then sent="${sent}CONT "; say "signal $2 $3 CONT"; fi ;;
    esac
    eval "sent_$2_$3=\$sent"
  elif read_stat "$2" && [ "$st_start" = "$3" ]; then
    eval "denied_$2_$3=1"
    say "denied $2 $3 $1"
  else
    return
  fi
  alive=$((alive + 1))
  alive_ids="$alive_ids$2:$3 "
}

# settle_last_look KNOWN: the KILL phase's last look left members alive, each sent its KILL there
# or before: watched for up to 500 ms, one whose identity is gone (or only a zombie's) now is
# gone, never named a survivor for a KILL sent a moment before the answer. A last look that found
# a process no earlier round had (KNOWN: how many were tracked before it) saw the session's
# processes still appearing — one taking the tag from outside the session
# (test/sandbox/last-look): unsettled.
settle_last_look() {
  now_ms
  sl_until=$((now + 500))
  while [ "$alive" -gt 0 ]; do
    sl_left=' '
    alive=0
    for sl_id in $alive_ids; do
      eval "sl_sent=\${sent_${sl_id%:*}_${sl_id#*:}-} sl_denied=\${denied_${sl_id%:*}_${sl_id#*:}-}"
      if [ -n "$sl_denied" ]; then
        sl_left="$sl_left$sl_id "
      else
        case " $sl_sent " in
          *" KILL "*) read_stat "${sl_id%:*}" && [ "$st_start" = "${sl_id#*:}" ] && sl_left="$sl_left$sl_id " ;;
          *) sl_left="$sl_left$sl_id " ;;
        esac
      fi
    done
    alive_ids=$sl_left
    for sl_id in $alive_ids; do alive=$((alive + 1)); done
    [ "$alive" -gt 0 ] || break
    now_ms
    [ "$now" -lt "$sl_until" ] || break
    sleep 0.01 2>/dev/null || break
  done
  if [ "$1" != "$ntracked" ]; then
    complete=0
    say "warning UNSETTLED processes of the session were still appearing when the KILL phase ended: some may still run"
  fi
}

# round SIG: scan, then signal every member not yet sent SIG; `proven` when the helpers' word
# said the scan's members are childless helpers only. False when the scan failed.
round() {
  scan || return 1
  proven=
  helpers_childless && proven=1
  alive=0
  alive_ids=' '
  # The session's own processes a generation at a time, as helper-sweep.c's round_: first those
  # whose parent is no member waiting for this round's signal, then their children, and so on — a
  # process before what it started. TERMed after its child, a shell whose TERM is not handled ran
  # its next step in between (a cancelled `sh -c 'sleep 3; echo done'` exited 0, found by a new
  # user's trial), and the order found (/proc's, pid order for a fresh tree) is not parent-first
  # once the pids wrap (test/sandbox/sweep-order). Within a generation, the order found. A
  # member whose parents loop (pids reused), or that descends from such a loop, goes after every
  # generation, as found, never dropped. Then the named ones (helpers, the wrapper's --await)
  # last found first: a helper after what it holds — TERMed first it ended some of them itself,
  # and the report said they `exited` (an earlier trial's).
  # Each member's generation comes from one walk up its parents, remembered in sw_gen_PID
  # (sw_own_PID marks a member waiting for this round's signal, sw_ppid_PID its parent), and the
  # members go into sw_by_gen_G (sw_by_gen_L for a loop) in one pass: no pass per generation over
  # every member — a chain D deep of N members then cost N*D string matches on strings of N
  # members each, and a session's chain of 300 held one round of dash for 90 s
  # (docs/benchmarks.md). Evals, no fork: PID and PPID are digits.
  backwards= own= gens=-1
  for m in $members; do
    pid=${m%%:*} rest=${m#*:}
    case $given in
      *" $pid:${rest%%:*} "*) backwards="$m $backwards" ;;
      *) own="$own $m"; eval "sw_own_$pid=1" ;;
    esac
  done
  for e in $parents; do
    pid=${e%%:*} ppid=${e#*:}
    case $ppid in '' | *[!0-9]*) ppid=$pid ;; esac
    eval "sw_ppid_$pid=\$ppid"
  done
  for m in $own; do
    pid=${m%%:*}
    eval "gen=\${sw_gen_$pid-}"
    [ -z "$gen" ] || continue
    # Up from pid until a member whose generation is known, one whose parent is no member waiting
    # (or itself), or one already on this walk (a loop: W); then down the walk, numbering.
    walk= p=$pid
    while :; do
      eval "gen=\${sw_gen_$p-} q=\${sw_ppid_$p-}"
      [ -z "$gen" ] || break
      eval "sw_gen_$p=W"
      walk="$p $walk"
      eval "own_q=\${sw_own_$q-}"
      if [ "$q" = "$p" ] || [ -z "$own_q" ]; then gen=-1; break; fi
      p=$q
    done
    case $gen in W | L) gen=L ;; esac
    for p in $walk; do
      [ "$gen" = L ] || gen=$((gen + 1))
      eval "sw_gen_$p=\$gen"
    done
  done
  for m in $own; do
    pid=${m%%:*}
    eval "gen=\$sw_gen_$pid"
    [ "$gen" = L ] || [ "$gen" -le "$gens" ] || gens=$gen
    eval "sw_by_gen_$gen=\"\${sw_by_gen_$gen-} \$m\""
  done
  gen=0
  while :; do
    eval "generation=\${sw_by_gen_$gen-}"
    unset "sw_by_gen_$gen"
    for m in $generation; do
      pid=${m%%:*} rest=${m#*:}
      deliver "$1" "$pid" "${rest%%:*}" "${rest#*:}"
    done
    [ "$gen" != L ] || break
    if [ "$gen" -lt "$gens" ]; then gen=$((gen + 1)); else gen=L; fi
  done
  for e in $parents; do
    pid=${e%%:*}
    unset "sw_own_$pid" "sw_ppid_$pid" "sw_gen_$pid"
  done
  for m in $backwards; do
    pid=${m%%:*} rest=${m#*:}
    deliver "$1" "$pid" "${rest%%:*}" "${rest#*:}"
  done
  return 0
}

# phase SIG STARTED ROUNDS ENDED_BY
phase_done() {
  now_ms
  say "phase $1 $(($2 - t0)) $((now - $2)) $3 $4"
}

finish() {
  for id in $tracked; do
    case $alive_ids in
      *" $id "*)
        eval "denied=\${denied_${id%:*}_${id#*:}-}"
        if [ -n "$denied" ]; then say "end ${id%:*} ${id#*:} denied"; else say "end ${id%:*} ${id#*:} survived-kill"; fi ;;
      *) say "end ${id%:*} ${id#*:} gone" ;;
    esac
  done
  # The named cgroups, once empty: rmdir(2) removes none that still holds a process.
  # Below each, the cgroups a command made, deepest first.
  for cg in $cgroups; do
    for d in $(find "$cg" -depth -type d 2>/dev/null); do
      case $d in "$cg" | "$cg"/*) rmdir "$d" 2>/dev/null ;; esac
    done
  done
  now_ms
  # The proof: the records before it, counted, and the nonce. Nothing may follow it.
  say "done $tag $scans $((now - t0)) $complete $lines $nonce"
  exit 0
}

# ---- the sweep ---------------------------------------------------------------------------
now_ms
t0=$now
alive_ids=' '
say "reader $reader"
if ! procfs_ok; then
  complete=0
  say "warning NO_PROC /proc is missing or belongs to another PID namespace: processes of $tag were not looked for"
  finish
fi
for sig in TERM KILL; do
  now_ms
  started=$now
  rounds=0
  empty=0
  budget=$grace
  [ $sig = KILL ] && budget=$kill_after
  while :; do
    rounds=$((rounds + 1))
    if ! round $sig; then
      complete=0
      say "warning SCAN_FAILED the process table could not be read"
      phase_done $sig "$started" $rounds scan-failed
      finish
    fi
    # The helpers' word: nothing but them was left, and they are gone now.
    if [ -n "$proven" ] && helpers_gone; then
      phase_done $sig "$started" $rounds helper-childless
      finish
    fi
    # Empty only if the snapshot saw no member at all: one that was there and gone by its
    # signal (a fork-and-exit loop) is evidence the session still runs.
    if [ "$seen" -eq 0 ]; then empty=$((empty + 1)); else empty=0; fi
    if [ $empty -ge 2 ]; then
      phase_done $sig "$started" $rounds two-empty-scans
      finish
    fi
    now_ms
    [ $((now - started)) -ge "$budget" ] && break
    pause
  done
  if [ $sig = KILL ]; then
    # A process first found in the last round got its KILL a moment ago: look once more — and
    # what that look KILLs is watched die too (settle_last_look).
    pause
    rounds=$((rounds + 1))
    known=$ntracked
    round KILL || { complete=0; phase_done KILL "$started" $rounds scan-failed; finish; }
    if [ "$alive" -eq 0 ] && [ "$seen" -gt 0 ]; then
      complete=0
      say "warning UNSETTLED processes of the session were still appearing when the KILL phase ended: some may still run"
    elif [ "$alive" -eq 0 ]; then
      phase_done KILL "$started" $rounds verified-empty
      finish
    else
      settle_last_look "$known"
    fi
  fi
  phase_done $sig "$started" $rounds budget
done
finish
