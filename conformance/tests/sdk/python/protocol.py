"""Protocol checks driven by the PyPI ``iii-sdk`` (0.25.x) as a real client.

    python protocol.py ws://127.0.0.1:PORT

Runs every check against the engine at argv[1], prints one line per check,
and exits non-zero on the first failure with a clear message.
conformance/tests/sdk_clients.rs runs it with the venv it keeps in
<target>/sdk-cache/python, against the stand-in engine (and a real one when
III_BIN is set).

The SDK logs through ``logging`` on stderr; the checks' lines on stdout
start with ``ok`` or ``FAIL``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import sys
import threading
import time
from importlib.metadata import version as dist_version
from typing import Any, Callable

from iii import (
    InitOptions,
    InvocationError,
    RegistrationRejectedError,
    register_worker,
)

CALL_MS = 5000
WORKER = "py-proto-worker"
ECHO_REQUEST = {"type": "object", "properties": {"msg": {"type": "string"}}}
ECHO_RESPONSE = {"type": "object", "properties": {"echo": {}}}


class CheckFailure(Exception):
    pass


def fail(message: str) -> None:
    raise CheckFailure(message)


def check_true(cond: bool, message: str) -> None:
    if not cond:
        fail(message)


def check_equal(actual: Any, expected: Any, what: str) -> None:
    if actual != expected:
        fail(f"{what}: expected {json.dumps(expected)}, got {json.dumps(actual, default=repr)}")


def describe(err: BaseException) -> str:
    code = getattr(err, "code", None)
    if code is not None:
        return f"{type(err).__name__}(code={code!r}, message={getattr(err, 'message', str(err))!r})"
    return f"{type(err).__name__}: {err}"


_current = "(setup)"
_count = 0


def check(name: str, body: Callable[[], None]) -> None:
    global _current, _count
    _current = name
    body()
    _count += 1
    print(f"ok {_count} - {name}", flush=True)


def connect(url: str, name: str):
    # OTel is off: it is process-global in this SDK (one client's shutdown
    # tears it down for all), and it plays no part in these checks.
    return register_worker(
        url,
        InitOptions(worker_name=name, otel={"enabled": False}, enable_metrics_reporting=False),
    )


def call(client, function_id: str, payload: Any, timeout_ms: int = CALL_MS) -> Any:
    return client.trigger({"function_id": function_id, "payload": payload, "timeout_ms": timeout_ms})


def error_of(fn: Callable[[], Any], what: str) -> InvocationError:
    """The InvocationError ``fn`` raises; fails the check on anything else."""
    try:
        value = fn()
    except InvocationError as err:
        return err
    except CheckFailure:
        raise
    except Exception as err:  # noqa: BLE001 - reported as the failure
        fail(f"{what}: expected an InvocationError, got {describe(err)}")
    fail(f"{what}: expected an error, got the result {json.dumps(value, default=repr)}")
    raise AssertionError("unreachable")


def wait_for(seconds: float, what: str, probe: Callable[[], bool]) -> None:
    """Polls ``probe`` until true or the deadline: waits on an observable
    condition (a registration reaching the engine), never on a fixed delay."""
    until = time.monotonic() + seconds
    while True:
        if probe():
            return
        if time.monotonic() >= until:
            fail(f"{what}: still not true after {seconds} s")
        time.sleep(0.02)


def wait_visible(client, function_id: str) -> None:
    def probe() -> bool:
        try:
            call(client, "engine::functions::info", {"function_id": function_id})
            return True
        except InvocationError as err:
            if err.code == "NOT_FOUND":
                return False
            raise

    wait_for(10, f"{function_id} becomes visible", probe)


def main(url: str) -> None:
    sdk_version = dist_version("iii-sdk")
    print(f"# PyPI iii-sdk {sdk_version} against {url}", flush=True)
    if not sdk_version.startswith("0.25."):
        fail(f"expected PyPI iii-sdk 0.25.x, found {sdk_version}")

    worker = connect(url, WORKER)
    caller = connect(url, "py-proto-caller")

    def round_trip() -> None:
        def echo(data: Any) -> Any:
            return {"echo": data}

        worker.register_function(
            "demo::echo",
            echo,
            description="Echo the payload back",
            request_format=ECHO_REQUEST,
            response_format=ECHO_RESPONSE,
        )
        wait_visible(caller, "demo::echo")
        out = call(caller, "demo::echo", {"msg": "hello"})
        check_true(isinstance(out, dict) and isinstance(out.get("echo"), dict), f"echo result: got {out!r}")
        check_equal(out["echo"].get("msg"), "hello", "echoed msg")
        injected = out["echo"].get("_caller_worker_id")
        check_true(
            isinstance(injected, str) and injected != "",
            f"the engine injects _caller_worker_id into object payloads: got {json.dumps(out)}",
        )
        check_equal(injected, caller.worker_id, "_caller_worker_id is the caller's worker_id")
        check_equal(sorted(out["echo"]), ["_caller_worker_id", "msg"], "echoed keys")
        check_equal(call(caller, "demo::echo", [1, 2, 3]), {"echo": [1, 2, 3]}, "a non-object payload passes untouched")

    def handler_error() -> None:
        def failing(data: Any) -> Any:
            raise RuntimeError("demo failure")

        worker.register_function("demo::fail", failing)
        wait_visible(caller, "demo::fail")
        err = error_of(lambda: call(caller, "demo::fail", {"x": 1}), "demo::fail")
        # The Python SDK reports a raised handler error as `invocation_failed`
        # with str(error) and the traceback; the engine passes it through.
        check_equal(err.code, "invocation_failed", "error code")
        check_equal(err.message, "demo failure", "error message")
        check_equal(err.function_id, "demo::fail", "error function_id")
        check_true(
            isinstance(err.stacktrace, str) and "RuntimeError: demo failure" in err.stacktrace,
            f"the handler's traceback passes through: got {err.stacktrace!r}",
        )

    def not_found() -> None:
        err = error_of(lambda: call(caller, "demo::missing", {}), "demo::missing")
        check_equal(err.code, "function_not_found", "error code")
        check_equal(err.message, "Function demo::missing not found in namespace default.", "error message")

    def info_schemas() -> None:
        info = call(caller, "engine::functions::info", {"function_id": "demo::echo"})
        check_true(isinstance(info, dict), f"info answers an object: got {info!r}")
        check_equal(info.get("function_id"), "demo::echo", "function_id")
        check_equal(info.get("worker_name"), WORKER, "worker_name")
        check_equal(info.get("description"), "Echo the payload back", "description")
        check_equal(info.get("request_schema"), ECHO_REQUEST, "request_schema")
        check_equal(info.get("response_schema"), ECHO_RESPONSE, "response_schema")
        err = error_of(
            lambda: call(caller, "engine::functions::info", {"function_id": "nope::x"}),
            "info of an unknown id",
        )
        check_equal(err.code, "NOT_FOUND", "unknown id error code")

    def name_conflict() -> None:
        # The Python SDK treats WORKER_NAMESPACE_CONFLICT as fatal: it moves
        # to the `failed` state, stops reconnecting, and every later trigger
        # raises RegistrationRejectedError.
        twin = None
        rejection: RegistrationRejectedError | None = None
        try:
            twin = connect(url, WORKER)
        except RegistrationRejectedError as err:  # rejected before register_worker returned
            rejection = err
        try:
            if twin is not None:
                failed = threading.Event()
                twin.add_connection_state_listener(lambda state: state == "failed" and failed.set())
                try:
                    twin.register_function("twin::only", lambda data: {"twin": True})
                except RegistrationRejectedError:
                    pass
                check_true(
                    failed.wait(10),
                    f"the twin reaches the failed state: state {twin.get_connection_state()!r}",
                )
                try:
                    twin.trigger({"function_id": "demo::echo", "payload": {}, "timeout_ms": CALL_MS})
                except RegistrationRejectedError as err:
                    rejection = err
                except Exception as err:  # noqa: BLE001 - reported as the failure
                    fail(f"a rejected worker's trigger: expected RegistrationRejectedError, got {describe(err)}")
                else:
                    fail("a rejected worker's trigger: expected RegistrationRejectedError, got a result")
            check_true(rejection is not None, "the twin sees a RegistrationRejectedError")
            assert rejection is not None
            check_equal(rejection.code, "WORKER_NAMESPACE_CONFLICT", "rejection code")
            check_equal(rejection.worker_name, WORKER, "rejected worker_name")
            check_equal(rejection.namespace, "default", "rejected namespace")
            check_true(bool(rejection.owner_worker_id), f"the rejection names the owner: {rejection}")
            # The first worker keeps serving; the twin's function never shows.
            out = call(caller, "demo::echo", {"msg": "still here"})
            check_equal(out["echo"]["msg"], "still here", "the first worker still answers")
            info = call(caller, "engine::functions::info", {"function_id": "demo::echo"})
            check_equal(info.get("worker_name"), WORKER, "demo::echo still belongs to the first worker")
            gone = error_of(lambda: call(caller, "twin::only", {}), "twin::only")
            check_equal(gone.code, "function_not_found", "the twin's function is not callable")
            unlisted = error_of(
                lambda: call(caller, "engine::functions::info", {"function_id": "twin::only"}),
                "info of twin::only",
            )
            check_equal(unlisted.code, "NOT_FOUND", "the twin's function is not listed")
        finally:
            if twin is not None:
                twin.shutdown()

    def invocation_stopped() -> None:
        hanger = connect(url, "py-proto-hanger")
        started = threading.Event()

        async def hang(data: Any) -> Any:
            started.set()
            await asyncio.Event().wait()  # never answers

        hanger.register_function("demo::hang", hang)
        wait_visible(caller, "demo::hang")
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(call, caller, "demo::hang", {}, 15000)
            check_true(started.wait(10), "the demo::hang handler starts")
            hanger.shutdown()
            try:
                pending.result(timeout=10)
            except concurrent.futures.TimeoutError:
                fail("the caller is answered: no answer within 10 s")
            except InvocationError as err:
                check_equal(err.code, "invocation_stopped", "error code")
            except Exception as err:  # noqa: BLE001 - reported as the failure
                fail(f"expected an InvocationError, got {describe(err)}")
            else:
                fail("demo::hang: expected an error, got a result")

    def vanish() -> None:
        worker.shutdown()

        def probe() -> bool:
            try:
                call(caller, "demo::echo", {})
                return False
            except InvocationError as err:
                return err.code == "function_not_found"

        wait_for(10, "demo::echo disappears", probe)

    check("register then trigger: payload echoed, _caller_worker_id injected", round_trip)
    check("a handler error arrives with its code", handler_error)
    check("function_not_found", not_found)
    check("engine::functions::info returns the registered schemas", info_schemas)
    check("a second live worker with a taken name is rejected", name_conflict)
    check("a callee disconnect mid-call gives invocation_stopped", invocation_stopped)
    check("a worker's functions vanish when its socket closes", vanish)
    caller.shutdown()
    print(f"# {_count} checks passed", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: python protocol.py ws://HOST:PORT", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="[py-sdk] %(levelname)s %(name)s: %(message)s",
    )
    code = 0
    try:
        main(sys.argv[1])
    except CheckFailure as err:
        print(f"FAIL - {_current}: {err}", flush=True)
        code = 1
    except BaseException as err:  # noqa: BLE001 - any escape is a failure
        print(f"FAIL - {_current}: unexpected error: {describe(err)}", flush=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # The SDK runs each client's event loop on a non-daemon thread; a client
    # left open by a failed check would keep the process alive. Exit hard.
    os._exit(code)
