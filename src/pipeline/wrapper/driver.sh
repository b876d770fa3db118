__sp_cell() { builtin trap '{ builtin eval "$__sp_on_int"; } 2>/dev/null' INT; builtin trap '{ builtin eval "$__sp_on_err"; } 2>/dev/null' ERR; builtin set -E$__sp_flags; [[ $__sp_prev == 0 ]] || __sp_ret "$__sp_prev" && :; builtin eval "$__sp_code"; { __sp_st=$?; [[ -n $__sp_f ]] || __sp_f=$-; builtin set +euvx; } 2>/dev/null; [[ -z $__sp_keep ]] || { builtin local -p >"$__sp_locals"; } 2>/dev/null || :; builtin return $__sp_st; }
# ^ __sp_cell runs one cell (see "How a cell runs" below). It sits on line 1 because bash
#   numbers the lines of an eval from the line of the eval: on line 1, error messages give
#   the cell's own line numbers ("environment: eval: line 2: syntax error ...").
#
# sandpit bash driver: a persistent shell behind a framed protocol.
#
# Started by the host as:  bash --noprofile --norc -c "<this file>"
#
# Channels
#   fd 0/1  the session terminal (PTY slave: stdin, stdout); fd 2  a separate stderr pipe
#   fd 3    requests, host -> driver      fd 4  responses, driver -> host
#
# Protocol
#   1. On start the driver writes one line on fd 4:
#        {"ready":true,"language":"bash","version":"5.x.y","pid":N}
#   2. Each request on fd 3 is an ASCII header line
#        ID NONCE INTERACTIVE PRELUDE_LEN CODE_LEN\n
#      (NONCE: 32 lowercase hex; INTERACTIVE: 0|1; lengths in bytes) followed by exactly
#      PRELUDE_LEN bytes of prelude (`export NAME='value'` lines, evaluated in the shell
#      before the code) and CODE_LEN bytes of code.
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
#      until {"tool_result":{"id":N,...}}.  A line that starts with "{" where a header is
#      expected is a late answer: skipped.
#
# How a cell runs
#   - Inside the function __sp_cell (line 1), so that an interrupt can end it: the INT trap returns
#     from the running function and a DEBUG trap returns from each caller in turn, up to and
#     out of __sp_cell.  A loop inside a function the cell calls is aborted as well.
#   - Cells run as if at the top level: variables the cell declares with declare/typeset/
#     local (which inside a function would be local to it) are copied to the global scope
#     when the cell ends (written out with `local -p` to $TMPDIR on every way out of
#     __sp_cell except a `return` in the cell's code, then sourced at the top level).
#   - With fds 3 and 4 closed (user commands never see them), and for non-interactive
#     cells with stdin from /dev/null, so reads get EOF at once.  After a non-interactive
#     cell the driver reads away the ^D the host queued on the terminal for it, so that it
#     cannot end a read in a later interactive cell.
#   - `set -e`: a failing command ends the cell (exit status = the command's), not the
#     session: an ERR trap (inherited into functions with set -E) unwinds like an interrupt.
#     The option stays on for the next cell, like the other options (-u, -x, -v, pipefail).
#   - `exit [N]` in a cell ends the cell with status N (0: "ok"), not the session: `exit` is
#     a function that unwinds like an interrupt (in subshells it is the real exit).
#     `builtin exit`, and an expansion error under `set -u`, end the shell as in any bash
#     script: the host sees the interpreter exit and restarts the session.
#   - Between cells SIGINT is ignored and the driver's own commands run with -e -u -x -v
#     off (every way out of a cell turns them off); each cell gets the user's options back.
#   - Bash strings cannot hold NUL bytes: a NUL in the code or prelude is dropped.
#   - `$?` at the start of a cell is the previous cell's exit status, as at a shell prompt
#     (set by `__sp_ret` in a && list, which neither the ERR trap nor set -e act on, when it
#     is not 0; under the user's `set -x` it shows as trace lines).
#
# Host tools in bash
#   - `sandpit-tool NAME [JSON | -]` (a function of this shell): prints the tool's result as
#     JSON on stdout and returns 0, or prints the error on stderr and returns 1 (2: usage).
#     `-` reads the arguments from stdin.  `sandpit-tool --list` names the tools,
#     `sandpit-tool --describe` prints them as JSON.
#   - The channel: while __sp_cell runs with `3<&- 4>&-`, bash keeps the driver's fds 3 and 4
#     as its saved copies on fds 10 and 11 (the lowest free at or above 10, closed-on-exec;
#     10 and 11 are closed at start so that they are free).  The shell and its subshells
#     (pipelines, $(...), ( ), & within the cell) reach them; programs the cell executes do
#     not, so the channel never leaves this shell.
#   - Callers are serialized by a lock file ($TMPDIR/.sandpit-tool-lock.$$, made with
#     noclobber, holding the caller's pid).  At the end of a cell the driver waits for a call
#     in progress (the host answers it, or cancels it when it interrupts the cell) before it
#     responds.
#   - A call checks that its cell is still the running one ($TMPDIR/.sandpit-tool-cell.$$,
#     written in place at the start and the end of each cell), so that a background job left
#     by an earlier cell never reads the request channel between cells.  The file is kept
#     from the first cell whose code names sandpit-tool (or may run code it cannot see:
#     source, eval, `. `); before that there is none, and a call does not check.

# Trap texts. The traps __sp_cell sets eval them from these variables: the trap builtin's
# cost grows with the length of the text it is given, and each cell sets two (with their
# stderr, the handler's own xtrace under the user's set -x, on /dev/null). The first way out
# of a cell records the shell options in __sp_f, and each turns off -e -u -x -v. __sp_save
# writes the cell's locals out when the cell may have declared some (__sp_keep), only from
# __sp_cell's frame.
# A return out of a trap goes through eval. When SIGINT kills (or is caught by) the foreground
# job, bash runs the INT trap from its wait for that job with its job list frozen (no job is
# removed), and thaws the list after the handler; a plain `return` jumps past that, so the list
# stayed frozen for good: the killed job and every later one, even a finished foreground
# command, stayed in `jobs`, and disown/wait could not remove them. A return out of an eval
# run inside a trap thaws the list (bash's evalstring). (The DEBUG trap set first fires on the
# INT trap's next command, so the return taken is the one in __sp_unwind.)
__sp_save='[[ -n $__sp_keep && ${FUNCNAME-} == __sp_cell ]] && { builtin local -p >"$__sp_locals"; } 2>/dev/null || :'
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

# Reads the next request (see "Protocol"): the header (skipping a late tool answer, a line
# that starts with "{"), then the prelude and the code into __sp_prelude and __sp_code.
# In the C locale, local to the function, so that read -n and ${#...} count bytes; it is
# switched to before the driver waits for the request, so only the switch back adds to a
# cell's time. LC_CTYPE is cheaper to switch than LC_ALL, which is only needed when the user
# set LC_ALL. A field is one read of its length in the usual case; read -d '' stops at a NUL
# byte, which bash cannot store: it is consumed and dropped, and __sp_read_more reads the rest,
# so the framing stays in step. Returns non-zero at EOF.
__sp_recv() {
    if [[ -n ${LC_ALL+set} ]]; then local LC_ALL=C; else local LC_CTYPE=C; fi
    IFS=' ' builtin read -r -u 3 __sp_id __sp_nonce __sp_inter __sp_plen __sp_clen || return
    while [[ $__sp_id == '{'* ]]; do
        IFS=' ' builtin read -r -u 3 __sp_id __sp_nonce __sp_inter __sp_plen __sp_clen || return
    done
    __sp_prelude= __sp_code=
    if ((__sp_plen > 0)); then
        IFS= builtin read -r -d '' -n "$__sp_plen" -u 3 __sp_prelude || return
        ((${#__sp_prelude} == __sp_plen)) || __sp_read_more __sp_prelude "$__sp_plen" || return
    fi
    if ((__sp_clen > 0)); then
        IFS= builtin read -r -d '' -n "$__sp_clen" -u 3 __sp_code || return
        ((${#__sp_code} == __sp_clen)) || __sp_read_more __sp_code "$__sp_clen" || return
    fi
}

# After a read of a field that stopped at a NUL: reads the rest of the field ($2 bytes in all)
# into the variable named $1, in the caller's C locale.
__sp_read_more() {
    local buf=${!1} want chunk
    want=$(($2 - ${#buf} - 1)) # the NUL was read too
    while ((want > 0)); do
        IFS= builtin read -r -d '' -n "$want" -u 3 chunk
        case $?,$((${#chunk} == want)) in
        *,1) want=0 ;;                    # the whole rest
        0,0) ((want -= ${#chunk} + 1)) ;; # stopped at a NUL
        *) return 1 ;;                    # EOF
        esac
        buf+=$chunk
    done
    builtin printf -v "$1" %s "$buf"
}

__sp_ret() { return "$1"; }
__sp_prev=0 # the last cell's exit status: $? when the next cell starts

__sp_tool_lock="${TMPDIR:-/tmp}/.sandpit-tool-lock.$$"
__sp_tool_cell="${TMPDIR:-/tmp}/.sandpit-tool-cell.$$"
__sp_tool_seq=0
__sp_tool_track=
# (Not `builtin exec`: its redirections would only last for the builtin.)
exec 10<&- 11>&-

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
    if [[ $cur != "$__sp_id" ]] || ! { : >&11; } 2>/dev/null; then
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

builtin trap '' INT
builtin set -E
builtin printf '{"ready":true,"language":"bash","version":"%s","pid":%d}\n' "${BASH_VERSION%%[^0-9.]*}" "$$" >&4

# The loop keeps its work per cell small (each bash command costs microseconds, more with
# a long argument): no forks, one test of the code for all the keywords, short trap texts, and
# what only the next cell needs after the response.
while :; do
    __sp_recv || break
    # Only declare/typeset/local can leave variables local to __sp_cell, only sandpit-tool
    # calls a host tool, and source/eval/. may run either (;;& tests the next pattern too).
    __sp_keep=
    case $__sp_code in
    *source* | *eval* | *". "*) __sp_keep=1 __sp_tool_track=1 ;;
    *declare* | *typeset* | *local*) __sp_keep=1 ;;&
    *sandpit-tool*) __sp_tool_track=1 ;;
    esac
    if [[ -n $__sp_prelude ]]; then
        builtin eval "$__sp_prelude" 3<&- 4>&-
    fi
    if [[ -n $__sp_tool_track ]]; then
        # In place and fixed width: truncating a file may cost a disk flush every cell.
        { builtin printf '%-20s\n' "$__sp_id" 1<>"$__sp_tool_cell"; } 2>/dev/null
    fi
    __sp_int=0 __sp_f= __sp_in_cell=1
    # 3 and 4 first: bash keeps their saved copies on fds 10 and 11 (see "Host tools").
    if [[ $__sp_inter == 1 ]]; then
        __sp_cell 3<&- 4>&-
    else
        __sp_cell 3<&- 4>&- </dev/null
    fi
    # Back in the driver. Options and xtrace are already off on every way out of __sp_cell
    # but a `return` in the cell's code.
    __sp_rc=$? __sp_in_cell=
    [[ -n $__sp_f ]] || { __sp_f=$-; builtin set +euvx; } 2>/dev/null
    builtin trap '' INT
    builtin trap - DEBUG ERR
    # No tool call from now on; wait for one in progress (the host answers or cancels it).
    if [[ -n $__sp_tool_track ]]; then
        { builtin printf '%-20s\n' - 1<>"$__sp_tool_cell"; } 2>/dev/null
    fi
    while [[ -e $__sp_tool_lock ]]; do
        __sp_owner=
        IFS= builtin read -r __sp_owner <"$__sp_tool_lock" 2>/dev/null || :
        if [[ $__sp_owner == "$$" ]] || { [[ -n $__sp_owner ]] && ! builtin kill -0 "$__sp_owner" 2>/dev/null; }; then
            command -p rm -f -- "$__sp_tool_lock"
        else
            command -p sleep 0.01
        fi
    done
    if [[ $__sp_inter != 1 && -t 0 ]]; then
        # Read away the ^D the host queued on the terminal for this cell, whose stdin was
        # /dev/null, so that it cannot end a read in a later interactive cell. (Before the
        # response: after it, the host may already type for the next cell.)
        for __sp_junk in 1 2 3 4; do
            builtin read -t 0 -u 0 && builtin read -r -t 0.05 -u 0 __sp_junk || break
        done
    fi
    __sp_prev=$__sp_rc __sp_status=ok
    if ((__sp_int)); then
        __sp_status=interrupted __sp_rc=130 __sp_prev=130
    elif ((__sp_rc)); then
        __sp_status=error
    fi
    builtin printf '\036sandpit-end:%s\036' "$__sp_nonce"
    builtin printf '\036sandpit-end:%s\036' "$__sp_nonce" >&2
    builtin printf '{"id":%d,"nonce":"%s","status":"%s","exit_code":%d,"result":null,"exception":null,"warnings":[]}\n' \
        "$__sp_id" "$__sp_nonce" "$__sp_status" "$__sp_rc" >&4

    # Housekeeping after the response (anything printed now belongs to no cell).
    if [[ -n $__sp_keep && -s $__sp_locals ]]; then
        builtin source "$__sp_locals"
        : >"$__sp_locals"
    fi
    __sp_flags=${__sp_f//[!euvx]/}
done
builtin exit 0
