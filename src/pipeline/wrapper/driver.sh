__sp_cell() { __sp_arm; [[ $__sp_flags$__sp_prev == 0 ]] || __sp_pre && :; builtin eval "$__sp_code"; }; __sp_cellk() { __sp_arm; [[ $__sp_flags$__sp_prev == 0 ]] || __sp_pre && :; builtin eval "$__sp_code"; { __sp_st=$? __sp_f=${__sp_f:-$-}; builtin set +euvx; builtin local -p >"$__sp_locals"; } 2>/dev/null; builtin return $__sp_st; }
# ^ __sp_cell runs one cell, and __sp_cellk one that may declare variables (see "How a cell
#   runs" below). They sit on line 1 because bash numbers the lines of an eval from the line of
#   the eval: on line 1, error messages give
#   the cell's own line numbers ("environment: eval: line 2: syntax error ...").
#
# sandpit bash driver: a persistent shell behind a framed protocol.
#
# Started by the host as:  bash --noprofile --norc -c "<this file>"
#
# Channels
#   fd 0/1  the session terminal (PTY slave: stdin, stdout); fd 2  a separate stderr pipe
#   fd 3    requests, host -> driver      fd 4  responses, driver -> host
#   fd 5    at start only, where the host passes it: the library of the builtins __sp_recv,
#           __sp_arm, __sp_disarm and __sp_send (driver_bash.c; see "Reading a request")
#
# Protocol
#   1. On start the driver writes one line on fd 4:
#        {"ready":true,"language":"bash","version":"5.x.y","pid":N}
#   2. Each request on fd 3 is a fixed-width ASCII header of 67 bytes, no newline,
#        IP NONCE ID LEN
#      (I: INTERACTIVE, 0|1; P: 1 when a prelude follows; NONCE: 32 lowercase hex; ID: the
#      cell id left-aligned in 20 characters, LEN the code's length in bytes left-aligned in
#      10, both padded with spaces), followed, when P is 1, by the prelude (`export
#      NAME='value'` lines, evaluated in the shell before the code) and a NUL byte, then by
#      the code: exactly LEN bytes of ASCII, or, when LEN is "-", any text and a NUL byte.
#      The host removes NUL bytes from both first (bash strings cannot hold them), so a field
#      ends at its NUL and is read whole by one mapfile, whatever the locale; an ASCII code is
#      read by one `read -N LEN` (one system call, where mapfile reads a pipe byte by byte),
#      as ASCII bytes are characters in any locale.
#   3. The code runs in this shell, so variables, functions, options and the working
#      directory persist.  When it ends the driver writes the end marker
#      "\x1esandpit-end:NONCE\x1e" on fd 1 and on fd 2, then one line on fd 4:
#        {"id":ID,"nonce":"NONCE","status":"ok"|"error"|"interrupted","exit_code":N,
#         "result":null,"exception":null,"warnings":[]}
#      status "error" when the cell's exit status ($?) is non-zero; "interrupted" (130)
#      after SIGINT.
#   4. EOF on fd 3: exit 0.
#   5. Host tools (see "Tool calls" in src/pipeline/wrapper/mod.rs): while a cell runs,
#      `sandpit-tool NAME '{json}'` writes {"tool_call":{"id":N,"cell":ID,"name":...,
#      "arguments":...}} as one line on the response channel and reads the request channel
#      until {"tool_result":{"id":N,...}}.  A "{" where a header is expected starts a late
#      answer: its line is skipped.
#
# How a cell runs
#   - Inside the function __sp_cell (line 1), so that an interrupt can end it: the INT trap
#     returns from the running function and a DEBUG trap returns from each caller in turn, up
#     to and out of the cell's function.  A loop inside a function the cell calls is aborted as
#     well.  The function sets the INT and ERR traps (__sp_arm), then the user's options and
#     $?, then evals the code (see the loop for why the function is kept that short).
#   - Cells run as if at the top level: variables the cell declares with declare/typeset/
#     local (which inside a function would be local to it) are copied to the global scope
#     when the cell ends (written out with `local -p` to $TMPDIR on every way out of
#     __sp_cellk, run instead of __sp_cell when the code may declare some, except a `return`
#     in the cell's code, then sourced at the top level).
#   - With fds 3 and 4 closed (user commands never see them), and for non-interactive
#     cells with stdin from /dev/null, so reads get EOF at once.  A cell's `exec` on fds 0, 3
#     or 4 lasts until the cell ends (the driver puts back /dev/null and closes 3 and 4; an
#     interactive cell's stdin, the terminal, is a redirection of the call); `exec >file` and
#     other fds last, as in any shell.  The ^D the host queues on the terminal for a
#     non-interactive cell (for a program that opens /dev/tty) is left there: the host
#     discards unread terminal input before every cell (`flush_terminal_input`), so it cannot
#     end a read in a later interactive cell. (Reading it away here cost a third of a warm
#     cell: a select and a read on the terminal, 40-50 us.)
#   - `set -e`: a failing command ends the cell (exit status = the command's), not the
#     session: an ERR trap (inherited into functions with set -E) unwinds like an interrupt.
#     The option stays on for the next cell, like the other options (-u, -x, -v, pipefail).
#   - `exit [N]` in a cell ends the cell with status N (0: "ok"), not the session: `exit` is
#     a function that unwinds like an interrupt (in subshells it is the real exit).
#     `builtin exit`, and an expansion error under `set -u`, end the shell as in any bash
#     script: the host sees the interpreter exit and restarts the session.
#   - Between cells SIGINT is ignored, there is no ERR or DEBUG trap (whatever the cell set,
#     and however it called the trap builtin), and the driver's own commands run with -e -u -x
#     -v off (every way out of a cell turns them off); each cell gets the driver's ERR trap and
#     the user's options back.  A user's ERR trap thus lasts until its cell ends; it fires for
#     the cell's eval too when the cell's status is not 0 (the eval is a failing command of the
#     cell's function), but not in the driver.
#   - `set -e; return N` (N not 0) at the top level of a cell ends the session: bash's errexit
#     acts on the cell function's status before the driver gets it back (the host restarts
#     the session).
#   - Bash strings cannot hold NUL bytes: the host drops a NUL in the code or prelude.
#   - `$?` at the start of a cell is the previous cell's exit status, as at a shell prompt
#     (set by `__sp_pre` in a && list, which neither the ERR trap nor set -e act on, when it
#     is not 0 or there are options to put back; under the user's `set -x` it shows as trace
#     lines).
#
# Host tools in bash
#   - `sandpit-tool NAME [JSON | -]` (a function of this shell): prints the tool's result as
#     JSON on stdout and returns 0, or prints the error on stderr and returns 1 (2: usage).
#     `-` reads the arguments from stdin.  `sandpit-tool --list` names the tools,
#     `sandpit-tool --describe` prints them as JSON.
#   - The channel: the driver's loop runs with `3<&- 4>&-`, so bash keeps the driver's fds 3
#     and 4 as its saved copies on fds 10 and 11 (the lowest free at or above 10,
#     closed-on-exec; 10 to 12 are closed at start so that they are free).  The shell and its subshells
#     (pipelines, $(...), ( ), & within the cell) reach them; programs the cell executes do
#     not, so the channel never leaves this shell.
#   - Callers are serialized by a lock file ($TMPDIR/.sandpit-tool-lock.$$, made with
#     noclobber, holding the caller's pid).  At the end of a cell the driver waits for a call
#     in progress (the host answers it, or cancels it when it interrupts the cell) before it
#     responds, whatever made the call (a background job too).  A call made between cells
#     (from a trap of the shell) is refused.
#   - A call checks that its cell is still the running one ($TMPDIR/.sandpit-tool-cell.$$,
#     written in place at the start and the end of each cell), so that a background job left
#     by an earlier cell never reads the request channel between cells.  The file is kept
#     from the first cell whose code names sandpit-tool (or may run code it cannot see:
#     source, eval, `. `); before that there is none, and a call does not check.

# bash 4.4 or later (mapfile -d reads the request's fields): an older one is refused at once,
# with the reason on stderr, rather than failing at its first request.
if ((BASH_VERSINFO[0] < 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] < 4))); then
    builtin printf 'sandpit: the bash driver needs bash 4.4 or later; this is %s\n' "$BASH_VERSION" >&2
    builtin exit 2
fi

# Trap texts. The traps set for each cell eval them from these variables: the trap builtin's
# cost grows with the length of the text it is given, and each cell sets two (with their
# stderr, the handler's own xtrace under the user's set -x, on /dev/null). The first way out
# of a cell records the shell options in __sp_f, and each turns off -e -u -x -v. __sp_save
# writes the cell's locals out when the cell may have declared some, only from __sp_cellk's
# frame.
# A return out of a trap goes through eval. When SIGINT kills (or is caught by) the foreground
# job, bash runs the INT trap from its wait for that job with its job list frozen (no job is
# removed), and thaws the list after the handler; a plain `return` jumps past that, so the list
# stayed frozen for good: the killed job and every later one, even a finished foreground
# command, stayed in `jobs`, and disown/wait could not remove them. A return out of an eval
# run inside a trap thaws the list (bash's evalstring). (The DEBUG trap set first fires on the
# INT trap's next command, so the return taken is the one in __sp_unwind.)
__sp_save='[[ ${FUNCNAME-} == __sp_cellk ]] && { builtin local -p >"$__sp_locals"; } 2>/dev/null || :'
__sp_unwind='if [[ ${FUNCNAME-} ]]; then '$__sp_save'; builtin eval "builtin return $__sp_st"; fi'
__sp_on_int='{ [[ -n $__sp_f ]] || __sp_f=$-; builtin set +euvx; } 2>/dev/null; __sp_int=1 __sp_st=130; if [[ ${FUNCNAME-} ]]; then builtin trap "$__sp_unwind" DEBUG; '$__sp_save'; builtin eval "builtin return 130"; fi'
__sp_on_err='__sp_st=$?; if [[ $- == *e* && $BASHPID == $$ ]]; then { [[ -n $__sp_f ]] || __sp_f=$-; builtin set +euvx; } 2>/dev/null; if [[ ${FUNCNAME-} ]]; then builtin trap "$__sp_unwind" DEBUG; '$__sp_save'; builtin return $__sp_st; fi; fi'
__sp_locals="${TMPDIR:-/tmp}/.sandpit-bash-locals.$$"
__sp_in_cell=

# `exit` in a cell ends the cell with that status (like sys.exit in the Python driver), not
# the session. In a subshell, and outside a cell, it is the real exit.
exit() {
    __sp_st=$?
    if [[ $BASHPID != "$$" || -z $__sp_in_cell ]]; then builtin exit "${@:-$__sp_st}"; fi
    if [[ $# -gt 0 ]]; then
        if [[ $1 =~ ^[-+]?[0-9]+$ ]]; then __sp_st=$(($1 & 255)); else
            builtin printf 'exit: %s: numeric argument required\n' "$1" >&2
            __sp_st=2
        fi
    fi
    { [[ -n $__sp_f ]] || __sp_f=$-; builtin set +euvx; } 2>/dev/null
    builtin trap "$__sp_unwind" DEBUG
    builtin return $__sp_st
}
__sp_flags= # the user's -e -u -x -v, put back for each cell


# Before the cell's code (in the cell's function, in a && list, which neither the ERR trap nor
# set -e act on, when there is something to do): the user's options back, and $? set to the
# previous cell's status.
__sp_pre() {
    [[ -z $__sp_flags ]] || builtin set -$__sp_flags
    builtin return $__sp_prev
}
__sp_prev=0 # the last cell's exit status: $? when the next cell starts

__sp_tool_lock="${TMPDIR:-/tmp}/.sandpit-tool-lock.$$"
__sp_tool_cell="${TMPDIR:-/tmp}/.sandpit-tool-cell.$$"
__sp_tool_seq=0
__sp_tool_track=
# Reading a request, the cell's traps, and the answer: __sp_recv reads the next request from
# fd 10 (see "Protocol") into __sp_inter, __sp_id, __sp_prelude and __sp_code, and sets the
# per-cell variables, __sp_k and __sp_tool_track from the code's keywords, and __sp_in_cell
# (from here on a call of sandpit-tool is one of the cell's); it fails at EOF. __sp_arm sets
# the cell's SIGINT and ERR traps, and __sp_disarm (used by the loop only with the library)
# ignores SIGINT and removes the DEBUG and ERR traps. `__sp_send STATUS RC` writes the end
# markers on fds 1 and 2 and the response on fd 11.
# They are builtins written in C (driver_bash.c) where the host hands the shell that library
# as fd 5 (the linux, unsandboxed and Docker backends): together they save about 50 us of a
# warm cell's 140. Where it does not (macOS; or a shell that cannot load it), they are the
# functions below, which do the same in bash (one difference: being functions, they fire a
# RETURN trap the user set under `set -T`, between cells). Fd 5 is closed before any cell
# runs.
__sp_builtins=
if { builtin enable -f /proc/self/fd/5 __sp_recv __sp_arm __sp_disarm __sp_send; } 2>/dev/null; then
    __sp_builtins=1
else
    # The request: the header's first byte, then its other 66 bytes, each by one `read -N`
    # (bash 5.1+ reads a -N count with one system call, where it reads a line byte by byte
    # so as not to read past its newline; a -N read is assigned whole, whatever IFS), then
    # the prelude, ending at a NUL byte, read by one mapfile (a field's one element; bash
    # drops the NUL), and the code: an ASCII one by one `read -N LEN`, any other as the
    # prelude. The header is ASCII, so character offsets are byte offsets in any locale. A
    # first byte "{" starts a late tool answer: its line is skipped.
    __sp_recv() {
        builtin read -r -N 1 -u 10 __sp_inter || builtin return 1
        while [[ $__sp_inter == '{' ]]; do
            IFS= builtin read -r -u 10 __sp_junk
            builtin read -r -N 1 -u 10 __sp_inter || builtin return 1
        done
        builtin read -r -N 66 -u 10 __sp_h || builtin return 1
        # One command for all the per-cell variables (bash assigns from left to right).
        __sp_plen=${__sp_h:0:1} __sp_nonce=${__sp_h:2:32} __sp_id=${__sp_h:35:20} __sp_id=${__sp_id%% *} \
            __sp_len=${__sp_h:56} __sp_len=${__sp_len%% *} \
            __sp_prelude= __sp_code= __sp_k= __sp_int=0 __sp_f= __sp_mark=$'\036sandpit-end:'$__sp_nonce$'\036'
        [[ $__sp_plen == 0 ]] || builtin mapfile -d '' -n 1 -u 10 __sp_prelude || builtin return 1
        if [[ $__sp_len == - ]]; then
            builtin mapfile -d '' -n 1 -u 10 __sp_code || builtin return 1
        else
            builtin read -r -N "$__sp_len" -u 10 __sp_code || builtin return 1
        fi
        # Only declare/typeset/local can leave variables local to the cell's function
        # (__sp_k=k: __sp_cellk saves them), only sandpit-tool calls a host tool
        # (__sp_tool_track: the cell file is kept from then on), and source/eval/. may run
        # either (;;& tests the next pattern too).
        case $__sp_code in
        *source* | *eval* | *". "*) __sp_k=k __sp_tool_track=1 ;;&
        *declare* | *typeset* | *local*) __sp_k=k ;;&
        *sandpit-tool*) __sp_tool_track=1 ;;&
        *) __sp_in_cell=1 ;;
        esac
    }
    # The trap builtin costs more when it is given a handler (it first tries the text as a
    # signal name) or a signal by name (a table search): SIGINT by number.
    __sp_arm() {
        builtin trap '{ builtin eval "$__sp_on_int"; } 2>/dev/null' 2
        builtin trap '{ builtin eval "$__sp_on_err"; } 2>/dev/null' ERR
    }
    # printf of a plain %s (parsing escapes in a format costs more); echo of one string costs
    # bash less than printf's parse of a long format. Nothing in the response can be an
    # escape for echo (digits, hex, a status word), so xpg_echo does not matter.
    __sp_send() {
        builtin printf %s "$__sp_mark"
        builtin printf %s "$__sp_mark" >&2
        builtin echo "{\"id\":$__sp_id,\"nonce\":\"$__sp_nonce\",\"status\":\"$1\",\"exit_code\":$2,\"result\":null,\"exception\":null,\"warnings\":[]}" >&11
    }
fi
# (Not `builtin exec`: its redirections would only last for the builtin.)
exec 5<&- 10<&- 11>&- 12<&-

sandpit-tool() {
    local name="${1-}" args="${2-}" line id cur owner prefix had_c=
    [[ $- == *C* ]] && had_c=1
    case $name in
    --list)
        local IFS=,
        builtin printf '%s\n' ${SANDPIT_TOOLS-}
        return 0
        ;;
    --describe)
        builtin printf '%s\n' "${SANDPIT_TOOLS_INFO:-[]}"
        return 0
        ;;
    esac
    if [[ $# -lt 1 || $# -gt 2 || ! $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
        builtin printf 'usage: sandpit-tool NAME [JSON | -]   (sandpit-tool --list names the tools)\n' >&2
        return 2
    fi
    # A call from the shell itself (whatever name the code used for the function) turns on the
    # end-of-cell wait for the lock, which a call interrupted here leaves behind.
    __sp_tool_track=1
    if [[ $args == - ]]; then
        IFS= builtin read -r -d '' args || :
    fi
    args=${args//$'\n'/ }
    args=${args//$'\r'/ }
    [[ -n ${args//[[:space:]]/} ]] || args='{}'
    # One call at a time (subshells of the cell share the channel).
    until { builtin set -C && builtin printf '%s\n' "$BASHPID" >"$__sp_tool_lock"; } 2>/dev/null; do
        [[ -n $had_c ]] || builtin set +C
        owner=
        IFS= builtin read -r owner <"$__sp_tool_lock" 2>/dev/null || :
        if [[ -n $owner ]] && ! builtin kill -0 "$owner" 2>/dev/null; then
            command -p rm -f -- "$__sp_tool_lock"
        else
            command -p sleep 0.01
        fi
    done
    [[ -n $had_c ]] || builtin set +C
    cur=$__sp_id
    if [[ -e $__sp_tool_cell ]]; then
        builtin read -r cur <"$__sp_tool_cell" 2>/dev/null || :
    fi
    if [[ -z $__sp_in_cell || $cur != "$__sp_id" ]] || ! { : >&11; } 2>/dev/null; then
        command -p rm -f -- "$__sp_tool_lock"
        builtin printf 'sandpit-tool: host tools can only be called while a cell runs\n' >&2
        return 1
    fi
    id=$((BASHPID * 1000000 + ++__sp_tool_seq))
    builtin printf '{"tool_call":{"id":%s,"cell":%s,"name":"%s","arguments":%s}}\n' "$id" "$__sp_id" "$name" "$args" >&11
    prefix="{\"tool_result\":{\"id\":$id,"
    line=
    while IFS= builtin read -r -u 10 line; do
        [[ $line == "$prefix"* ]] && break
        line=
    done
    command -p rm -f -- "$__sp_tool_lock"
    line=${line#"$prefix"}
    if [[ $line == '"ok":true,"result":'* ]]; then
        line=${line#'"ok":true,"result":'}
        builtin printf '%s\n' "${line%'}}'}"
        return 0
    fi
    line=${line#'"ok":false,"cancelled":true,'}
    line=${line/#'"error":'/'"ok":false,"error":'}
    if [[ $line == '"ok":false,"error":'* ]]; then
        line=${line#'"ok":false,"error":"'}
        line=${line%'"}}'}
        line=${line//'\"'/'"'}
        line=${line//'\n'/$'\n'}
        line=${line//'\\'/'\'}
        builtin printf 'sandpit-tool: %s: %s\n' "$name" "$line" >&2
    else
        builtin printf 'sandpit-tool: %s: no answer from the host\n' "$name" >&2
    fi
    return 1
}

# Run between cells: before the cell, when a cell may have used a host tool (__sp_tool_track),
# write its id to the cell file; after it, then mark the file "-" (no call from now on), and
# when the lock file is there wait for the call in progress (the host answers it, or cancels
# it when it interrupts the cell).
__sp_tool_before() {
    # In place and fixed width: truncating a file may cost a disk flush every cell.
    { builtin printf '%-20s\n' "$__sp_id" 1<>"$__sp_tool_cell"; } 2>/dev/null
}
__sp_tool_after() {
    [[ -z $__sp_tool_track ]] || { builtin printf '%-20s\n' - 1<>"$__sp_tool_cell"; } 2>/dev/null
    while [[ -e $__sp_tool_lock ]]; do
        __sp_owner=
        IFS= builtin read -r __sp_owner <"$__sp_tool_lock" 2>/dev/null || :
        if [[ $__sp_owner == "$$" ]] || { [[ -n $__sp_owner ]] && ! builtin kill -0 "$__sp_owner" 2>/dev/null; }; then
            command -p rm -f -- "$__sp_tool_lock"
        else
            command -p sleep 0.01
        fi
    done
}
# The options to put back for the next cell: the user's -e -u -x -v, and -E (on from the start,
# for the ERR trap) if the user turned it off. Empty in the usual case: no `set` at all.
__sp_opts() {
    __sp_fl=$__sp_f __sp_flags=${__sp_f//[!euvx]/}
    [[ $__sp_f == *E* ]] || __sp_flags+=E
}
# After a cell: the tool lock (see __sp_tool_after), and stdin back on /dev/null and fds 3 and
# 4 closed if the cell's `exec` changed them (as a redirection around the call would, at the
# cost of a dozen system calls per cell).
__sp_after() {
    [[ -z $__sp_tool_track && ! -e $__sp_tool_lock ]] || __sp_tool_after
    [[ /dev/stdin -ef /dev/null && ! -e /dev/fd/3 && ! -e /dev/fd/4 ]] || command exec 0</dev/null 3<&- 4>&-
}
# The status of a cell that was interrupted (exit code 130) or failed.
__sp_failed() {
    if ((__sp_int)); then
        __sp_status=interrupted __sp_rc=130 __sp_prev=130
    elif ((__sp_rc)); then
        __sp_status=error
    fi
}

builtin trap '' INT
builtin set -E
builtin printf '{"ready":true,"language":"bash","version":"%s","pid":%d}\n' "${BASH_VERSION%%[^0-9.]*}" "$$" >&4
__sp_fl=

# The loop keeps its work per cell small: each bash command costs it about as many
# instructions as the whole of a trivial cell's own code (10-25K), so there are few of them:
# no forks, one command each to read a request, to set and to clear the cell's traps and to
# answer (__sp_recv, __sp_arm, __sp_disarm, __sp_send: builtins, where the library is loaded),
# short trap texts, rare work in functions behind one test, and what only the next cell needs
# after the response.
# Its redirections (`done 3<&- 4>&- 0</dev/null`) are made once for the whole loop rather than
# around each cell (each redirection costs bash a dozen system calls): fds 3 and 4 are closed
# inside it (user commands never see them) and stdin is /dev/null, and bash keeps the saved
# copies, closed-on-exec, on 10 (requests), 11 (responses) and 12 (the terminal), the lowest
# free fds at or above 10 (closed at start). The driver reads and writes 10 and 11, and a
# non-interactive cell runs with the loop's stdin, /dev/null, without a redirection; after the
# cell a test (two fstat and a stat) finds whether the cell's `exec` changed 0, 3 or 4.
while __sp_recv; do
    if [[ -n $__sp_prelude$__sp_tool_track ]]; then
        [[ -z $__sp_prelude ]] || builtin eval "$__sp_prelude"
        [[ -z $__sp_tool_track ]] || __sp_tool_before
    fi
    # The cell (see "How a cell runs"). At each call bash copies the function's whole body (and
    # frees the copy after), at a cost that grows with the size of the body: the cell's
    # functions are three short commands. Their first, __sp_arm, sets the traps: the ERR trap
    # cannot be set before the call, as it would fire once more on the function's non-zero
    # status (bash decides to run the ERR trap after a command by whether one was set when the
    # command started), and by then it may be the user's own.
    # An interactive cell gets the terminal (12) as stdin, a redirection of the call.
    if [[ $__sp_inter == 0 ]]; then __sp_cell$__sp_k; else __sp_cell$__sp_k <&12; fi
    # Back in the driver: the first way out of the cell records the shell options in __sp_f
    # (the unwinding traps do it before they turn -e -u -x -v off; a cell that ends normally
    # or with a `return` comes here with the user's options still on).
    { __sp_rc=$? __sp_prev=$? __sp_f=${__sp_f:-$-} __sp_in_cell= __sp_status=ok; builtin set +euvx; } 2>/dev/null
    # SIGINT ignored again, no ERR or DEBUG trap between cells (the cell may have set either,
    # under any name): the builtin __sp_disarm, or, without the library, the trap builtin
    # itself (a function would not do: a DEBUG trap that unwinds, under the user's set -T,
    # would return from it). Then the tool lock and the cell's fds (see __sp_after), one test in the
    # usual case.
    if [[ -n $__sp_builtins ]]; then __sp_disarm; else builtin trap '' 2; builtin trap - DEBUG ERR; fi
    [[ -z $__sp_tool_track && ! -e $__sp_tool_lock && /dev/stdin -ef /dev/null && ! -e /dev/fd/3 && ! -e /dev/fd/4 ]] || __sp_after
    # The status, then the markers and the response (see __sp_send).
    [[ $__sp_int$__sp_rc == 00 ]] || __sp_failed
    __sp_send $__sp_status $__sp_rc

    # Housekeeping after the response (anything printed now belongs to no cell): the user's
    # -e -u -x -v worked out again when the options changed, and the cell's declarations
    # made global (sourced here, at the top level).
    [[ $__sp_f == "$__sp_fl" && -z $__sp_k ]] || {
        __sp_opts
        if [[ -n $__sp_k && -s $__sp_locals ]]; then
            builtin source "$__sp_locals"
            : >"$__sp_locals"
        fi
    }
done 3<&- 4>&- 0</dev/null
builtin exit 0
