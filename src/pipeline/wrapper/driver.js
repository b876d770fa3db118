// sandpit JavaScript driver: a persistent REPL behind a framed protocol.
//
// Started by the host as:  node -e "<this file>"
//
// Channels
//   fd 0/1  the session terminal (PTY slave: stdin, stdout); fd 2  a separate stderr pipe
//   fd 3    requests, host -> driver      fd 4  responses, driver -> host
//
// Protocol
//   1. On start the driver writes one line on fd 4:
//        {"ready":true,"language":"javascript","version":"20.x.y","pid":N}
//   2. Each request on fd 3 is an ASCII header line
//        ID NONCE INTERACTIVE PRELUDE_LEN CODE_LEN\n
//      (NONCE: 32 lowercase hex; INTERACTIVE: 0|1; lengths in bytes) followed by exactly
//      PRELUDE_LEN bytes of prelude (a JSON object, or empty: each key becomes a property of
//      globalThis) and CODE_LEN bytes of UTF-8 code.
//   3. When the cell ends (its completion, including any top-level await, an uncaught
//      exception, or an interrupt) the driver writes the end marker "\x1esandpit-end:NONCE\x1e"
//      with fs.writeSync on fd 1 and on fd 2 (console output is synchronous on a terminal and
//      on a pipe, so everything the cell printed is before it), then one line on fd 4:
//        {"id":ID,"nonce":"NONCE","status":"ok"|"error"|"interrupted","exit_code":N,
//         "result":JSON|null,"exception":null|{"type","message","traceback"},"warnings":[...]}
//   4. EOF on fd 3: exit 0.
//
// How a cell runs
//   - Through V8's REPL mode (the one the DevTools console uses), reached with the in-process
//     inspector's Runtime.evaluate {replMode: true}: top-level await works, let/const/class
//     declarations persist from cell to cell, and a cell may declare them again.
//   - The evaluation is started inside a vm script run with breakOnSigint, so a synchronous
//     endless loop is stopped by SIGINT; while the cell waits on a promise, a process SIGINT
//     listener ends the wait.  Either way the cell reports "interrupted" and the session
//     keeps its state.  (Code running after an `await`, or in a timer, cannot be stopped.)
//   - Code compiled by the inspector has no module loader, so `import(` in the cell is
//     rewritten to a loader call of the driver's (resolving like `node -e`, from the cwd).
//   - An exception thrown by a timer or callback while a cell waits ends that cell with the
//     exception; outside a cell (and for unhandled rejections) it is printed on stderr and
//     the session carries on.
//   - result: the value of `result` (a global or a top-level let/const/var) if the cell bound
//     it: it did not exist, it is another value than before, or the code assigns `result =`.
//     undefined is null; a value JSON cannot encode is returned as util.inspect() text with
//     a warning.
//   - Non-interactive stdin: the host queues an end-of-file (^D) on the terminal before the
//     request, so reads of fd 0 get EOF; the driver does nothing about stdin.
//   - process.exit() ends the interpreter; the host restarts the session.
//   - Without an inspector (a node built without it) cells run as plain vm scripts: no
//     top-level await and no re-declaration.
//
// Everything is inside this function so that cells see none of the driver's names, except
// the non-enumerable global __sandpit_driver__ through which the evaluation is reached.
(function sandpitDriver() {
  'use strict';
  const fs = require('fs');
  const net = require('net');
  const util = require('util');
  const vm = require('vm');

  const MISSING = Symbol('missing');
  const OBJECT_GROUP = 'sandpit';

  // The request/response pipes are inherited from the host without close-on-exec, and node
  // has no fcntl: reopen them through /proc (node opens everything O_CLOEXEC) and close the
  // originals, so that processes the code spawns never hold them.
  function reopen(fd, flags) {
    try {
      const n = fs.openSync(`/proc/self/fd/${fd}`, flags);
      fs.closeSync(fd);
      return n;
    } catch {
      return fd;
    }
  }
  const requestFd = reopen(3, fs.constants.O_RDONLY);
  const responseFd = reopen(4, fs.constants.O_WRONLY);

  function writeAll(fd, data) {
    const buf = typeof data === 'string' ? Buffer.from(data) : data;
    let off = 0;
    while (off < buf.length) {
      try {
        off += fs.writeSync(fd, buf, off, buf.length - off);
      } catch (e) {
        if (e.code !== 'EAGAIN') throw e; // a non-blocking terminal that is full: retry
      }
    }
  }

  // Strings with lone surrogates would make the response line invalid JSON for the host.
  const wellFormed = (s) => (typeof s === 'string' ? s.toWellFormed() : s);
  function toJSON(value) {
    const s = JSON.stringify(value);
    if (s !== undefined && /\\ud[89a-f]/i.test(s)) {
      return JSON.stringify(value, (_k, v) => wellFormed(v));
    }
    return s;
  }

  // ---- evaluation --------------------------------------------------------------------
  let session = null;
  try {
    const inspector = require('inspector');
    session = new inspector.Session();
    session.connect();
  } catch {
    session = null;
  }

  // Reached from the vm runner script, from Runtime.callFunctionOn and from cells (import).
  const hook = {
    code: '',
    callback: null,
    caught: undefined,
    run() {
      session.post(
        'Runtime.evaluate',
        { expression: hook.code, replMode: true, awaitPromise: true, objectGroup: OBJECT_GROUP },
        hook.callback,
      );
    },
    catch(value) {
      hook.caught = value;
    },
    import(specifier, options) {
      return import(specifier, options);
    },
  };
  Object.defineProperty(globalThis, '__sandpit_driver__', { value: hook });
  const runner = new vm.Script('__sandpit_driver__.run()', { filename: 'sandpit-driver' });
  const resultProbe = new vm.Script('result', { filename: 'sandpit-driver' });

  // The current value of `result`, wherever it is declared, or MISSING.
  function readResult() {
    const limit = Error.stackTraceLimit;
    try {
      Error.stackTraceLimit = 0; // the ReferenceError when it does not exist: make it cheap
      return resultProbe.runInThisContext();
    } catch {
      return MISSING;
    } finally {
      try {
        Error.stackTraceLimit = limit;
      } catch {}
    }
  }

  // Drops the driver's frames (the inspector call and below) from a stack.
  function cleanStack(stack) {
    const lines = stack.split('\n');
    const cut = lines.findIndex((l) => /^\s+at .*(node:inspector:|sandpit-driver:|\[eval\]:)/.test(l));
    return (cut < 0 ? lines : lines.slice(0, cut)).join('\n');
  }

  function safe(f, fallback) {
    try {
      return f();
    } catch {
      return fallback;
    }
  }

  // {type, message, traceback} for a thrown value. `details` (the inspector's exception
  // details) and `code` locate a SyntaxError, whose stack has no cell frame.
  function describe(e, details, code, name) {
    let type, message, traceback;
    if (e !== null && (typeof e === 'object' || typeof e === 'function')) {
      type = safe(() => e.constructor.name, '') || safe(() => String(e.name), '') || 'Error';
      message = safe(() => (typeof e.message === 'string' ? e.message : String(e)), '');
      const stack = safe(() => e.stack, undefined);
      traceback = typeof stack === 'string' ? cleanStack(stack) : safe(() => 'Uncaught ' + util.inspect(e), '');
    } else {
      type = typeof e;
      message = safe(() => String(e), '');
      traceback = 'Uncaught ' + safe(() => util.inspect(e), message);
    }
    if (type === 'SyntaxError' && details && typeof details.lineNumber === 'number' && code !== undefined) {
      const line = code.split('\n')[details.lineNumber];
      if (line !== undefined) {
        const col = Math.max(0, Math.min(details.columnNumber | 0, line.length));
        traceback = `${name}:${details.lineNumber + 1}\n${line}\n${' '.repeat(col)}^\n\n${traceback}`;
      }
    }
    return { type: wellFormed(type), message: wellFormed(message), traceback: wellFormed(traceback) };
  }

  // ---- cells ---------------------------------------------------------------------------
  let current = null; // the running cell
  const queue = []; // requests not yet run
  const assignsResult = /(^|[^\w$.])result\s*([-+*/%&|^]|\*\*|<<|>>>?|&&|\|\||\?\?)?=(?!=)/;

  function runNext() {
    if (current || queue.length === 0) return;
    runCell(queue.shift());
  }

  function runCell(req) {
    const cell = { id: req.id, nonce: req.nonce, done: false, before: MISSING, assigns: false, warnings: [] };
    current = cell;
    const name = `cell-${req.id}`;
    let code = req.code;
    try {
      if (req.prelude.length > 0) {
        const input = JSON.parse(req.prelude);
        for (const key of Object.keys(input)) globalThis[key] = input[key];
      }
    } catch (e) {
      finish(cell, 'error', 1, describe(e));
      return;
    }
    cell.before = readResult();
    cell.assigns = code.includes('result') && assignsResult.test(code);
    if (code.includes('import')) code = code.replace(/(^|[^\w$.])import(\s*\()/g, '$1__sandpit_driver__.import$2');

    if (session === null) {
      // Fallback: a plain script, synchronous.
      try {
        new vm.Script(code, { filename: name }).runInThisContext({ breakOnSigint: true });
        finish(cell, 'ok', 0, null);
      } catch (e) {
        if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') finish(cell, 'interrupted', 130, null);
        else finish(cell, 'error', 1, describe(e));
      }
      return;
    }

    hook.code = `${code}\n//# sourceURL=${name}`;
    hook.callback = (err, res) => evaluated(cell, err, res, code, name);
    try {
      runner.runInThisContext({ breakOnSigint: true });
    } catch (e) {
      if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') finish(cell, 'interrupted', 130, null);
      else finish(cell, 'error', 1, describe(e));
    }
  }

  // The inspector's answer to Runtime.evaluate: the cell completed or threw.
  function evaluated(cell, err, res, code, name) {
    const details = res && res.exceptionDetails;
    const holdsObjects = Boolean((res && res.result && res.result.objectId) || (details && details.exception && details.exception.objectId));
    const release = () => {
      if (holdsObjects) session.post('Runtime.releaseObjectGroup', { objectGroup: OBJECT_GROUP });
    };
    if (cell.done) {
      release();
      return;
    }
    if (err) {
      release();
      finish(cell, 'error', 1, { type: 'Error', message: String(err.message), traceback: String(err.stack) });
      return;
    }
    if (!details) {
      release();
      // Let pending callbacks and rejection reports of this cell run first, so that what
      // they print lands before the end marker.
      setImmediate(() => finish(cell, 'ok', 0, null));
      return;
    }
    const ex = details.exception || {};
    if (!ex.objectId) {
      // A primitive was thrown.
      let value = ex.value;
      if ('unserializableValue' in ex) value = ex.description;
      release();
      finish(cell, 'error', 1, describe(value, details, code, name));
      return;
    }
    hook.caught = undefined;
    session.post(
      'Runtime.callFunctionOn',
      { objectId: ex.objectId, functionDeclaration: 'function () { __sandpit_driver__.catch(this); }' },
      () => {
        const value = hook.caught;
        hook.caught = undefined;
        release();
        finish(cell, 'error', 1, describe(value, details, code, name));
      },
    );
  }

  function finish(cell, status, exitCode, exception) {
    if (cell.done) return;
    cell.done = true;
    if (current === cell) current = null;

    let result = 'null';
    const after = readResult();
    if (after !== MISSING && (!Object.is(after, cell.before) || cell.assigns)) {
      let json;
      try {
        json = after === undefined ? 'null' : toJSON(after);
      } catch {
        json = undefined;
      }
      if (json === undefined) {
        json = JSON.stringify(wellFormed(safe(() => util.inspect(after), String(typeof after))));
        cell.warnings.push('result is not JSON-serialisable; returned its repr');
      }
      result = json;
    }

    const marker = Buffer.from(`\x1esandpit-end:${cell.nonce}\x1e`);
    for (const fd of [1, 2]) {
      try {
        writeAll(fd, marker);
      } catch {}
    }
    writeAll(
      responseFd,
      `{"id":${cell.id},"nonce":"${cell.nonce}","status":"${status}","exit_code":${exitCode},` +
        `"result":${result},"exception":${JSON.stringify(exception)},"warnings":${JSON.stringify(cell.warnings)}}\n`,
    );
    runNext();
  }

  // ---- signals and stray errors ----------------------------------------------------------
  // A SIGINT while a cell waits on a promise ends the cell; between cells it is ignored.
  // (During the synchronous part of a cell the breakOnSigint watchdog takes it instead.)
  process.on('SIGINT', () => {
    if (current && !current.done) finish(current, 'interrupted', 130, null);
  });

  function report(prefix, e) {
    const text = safe(() => (e instanceof Error && typeof e.stack === 'string' ? e.stack : util.inspect(e)), String(e));
    try {
      writeAll(2, `${prefix} ${text}\n`);
    } catch {}
  }
  process.on('uncaughtException', (e) => {
    if (current && !current.done) finish(current, 'error', 1, describe(e));
    else report('Uncaught', e);
  });
  process.on('unhandledRejection', (reason) => report('Uncaught (in promise)', reason));

  // ---- requests --------------------------------------------------------------------------
  let pending = Buffer.alloc(0);
  let header = null; // the parsed header line of the request being received
  const input = new net.Socket({ fd: requestFd, readable: true, writable: false });
  input.on('data', (chunk) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    for (;;) {
      if (header === null) {
        const nl = pending.indexOf(10);
        if (nl < 0) break;
        const fields = pending.toString('latin1', 0, nl).trim().split(/\s+/);
        pending = pending.subarray(nl + 1);
        if (fields.length !== 5 || !/^[0-9a-f]+$/.test(fields[1])) {
          writeAll(2, `sandpit driver: bad request header: ${JSON.stringify(fields.join(' ').slice(0, 200))}\n`);
          process.exit(2);
        }
        header = { id: Number(fields[0]), nonce: fields[1], interactive: fields[2] === '1', plen: Number(fields[3]), clen: Number(fields[4]) };
      }
      if (pending.length < header.plen + header.clen) break;
      const { plen, clen } = header;
      queue.push({
        id: header.id,
        nonce: header.nonce,
        interactive: header.interactive,
        prelude: pending.toString('utf8', 0, plen),
        code: pending.toString('utf8', plen, plen + clen),
      });
      pending = pending.subarray(plen + clen);
      header = null;
    }
    runNext();
  });
  input.on('end', () => process.exit(0));
  input.on('error', () => process.exit(0));

  writeAll(responseFd, JSON.stringify({ ready: true, language: 'javascript', version: process.versions.node, pid: process.pid }) + '\n');
})();
