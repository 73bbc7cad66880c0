#!/usr/bin/env python3
"""Records fixtures/ui/*.json: real calls to the worker over the hermetic bench.

Start the bench and the worker first (from the repo root):

    target/debug/code-runner-conformance serve --port 0      # prints ws://…
    III_URL=ws://… target/debug/sandbox-code-runner

then run `python3 ui/scripts/record_fixtures.py ws://…`. Every call goes
through `code-runner-conformance trigger`; a fixture holds the request, and the
response or the invocation error as the caller received it. Fixtures that no
real call can produce (an error message quoting an id, a call still in flight)
are written by hand and marked `"recorded": false`; this script leaves them be.
"""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "ui"
TRIGGER = ROOT / "target" / "debug" / "code-runner-conformance"


def call(url, function_id, payload):
    p = subprocess.run(
        [str(TRIGGER), "trigger", "--url", url, function_id, "--json", json.dumps(payload)],
        capture_output=True, text=True, timeout=120,
    )
    out = p.stdout.strip()
    if out.startswith("error: "):
        code, _, message = out[len("error: "):].partition(": ")
        return {"error": {"code": code, "message": message}}
    return {"output": json.loads(out)}


def save(name, about, function_id, payload, answer):
    doc = {"name": name, "about": about, "recorded": True,
           "function_id": function_id, "input": payload, **answer}
    (OUT / f"{name}.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return answer


def main(url):
    OUT.mkdir(parents=True, exist_ok=True)
    RUN, REG, TD = (f"sandbox-code-runner::{f}" for f in ("run", "register_function", "teardown"))
    rec = lambda name, about, fid, payload: save(name, about, fid, payload, call(url, fid, payload))

    rec("run-python-ok", "one-shot python run that succeeds", RUN,
        {"lang": "python", "code": "import platform\n\nnums = [n * n for n in range(1, 6)]\nprint(f\"squares: {nums}\")\nprint(\"sum =\", sum(nums))\n"})
    rec("run-node-ok", "one-shot node run with a mix of syntax to highlight", RUN,
        {"lang": "node", "timeout_ms": 10000, "code":
         "// word counts, sorted\nconst text = `the quick brown fox jumps over the lazy dog the end`;\n"
         "const counts = new Map();\nfor (const w of text.split(/\\s+/)) {\n  counts.set(w, (counts.get(w) ?? 0) + 1);\n}\n"
         "const top = [...counts].sort((a, b) => b[1] - a[1]).slice(0, 3);\n"
         "console.log(JSON.stringify(Object.fromEntries(top)));\n"})
    rec("run-python-exception", "python script that raises: exit 1 and a traceback, a response not an error", RUN,
        {"lang": "python", "code": "import json\n\ndef parse(s):\n    return json.loads(s)\n\nprint(\"parsing…\")\ndata = parse(\"{not json}\")\n"})
    rec("run-node-exit-code", "node script that exits 3 with a message on stderr", RUN,
        {"lang": "node", "code": "console.log('checking inputs');\nconsole.error('missing INPUT_PATH');\nprocess.exit(3);\n"})
    kept = rec("run-node-keep", "keep: true run that succeeds and returns its runtime_id", RUN,
               {"lang": "node", "keep": True, "code": "import { writeFileSync } from 'node:fs';\nwriteFileSync('/tmp/state.json', JSON.stringify({ n: 1 }));\nconsole.log('saved');\n"})
    rid = kept["output"]["runtime_id"]
    rec("run-reuse-leaky", "run in the kept runtime; the id also sits in the source, stdout and stderr", RUN,
        {"runtime_id": rid, "code":
         f"// reusing {rid}\nimport {{ readFileSync }} from 'node:fs';\nconst id = \"{rid}\";\n"
         "const state = JSON.parse(readFileSync('/tmp/state.json', 'utf8'));\n"
         "console.log(`runtime ${id} still has n=${state.n}`);\nconsole.error('do not share ' + id);\n"})
    rec("run-keep-failed", "keep: true run that fails: no runtime is kept, so no runtime_id", RUN,
        {"lang": "python", "keep": True, "code": "import sys\nprint('about to fail', file=sys.stderr)\nraise SystemExit(2)\n"})
    rec("run-id-in-keys", "the worker ignores unknown fields; this one carries an id as a key", RUN,
        {"lang": "python", "code": "print('ok')\n", "notes": {rid: "the kept runtime", "also": [rid.upper()]}})
    rec("register-python", "register_function with a python handler", REG,
        {"function_id": "my-app::double", "lang": "python", "description": "Double a number. Payload: { n: number }.",
         "source": "def handler(payload):\n    return {\"doubled\": payload[\"n\"] * 2}\n"})
    rec("register-node", "register_function with a node handler", REG,
        {"function_id": "shop::quote", "lang": "node", "description": "Price a basket.",
         "source": "const PRICES = { apple: 0.5, pear: 0.75 };\n\nexport function handler(payload) {\n  const items = payload.items ?? [];\n  return { total: items.reduce((t, i) => t + (PRICES[i] ?? 0), 0) };\n}\n"})
    rec("register-no-handler", "python source that defines no handler: refused", REG,
        {"function_id": "my-app::greet", "lang": "python",
         "source": "# handler(payload) is missing: only a helper here\ndef greet(name):\n    return f\"hello {name}\"\n"})
    rec("register-node-no-handler", "node source whose only `handler` is in a comment and a string: refused", REG,
        {"function_id": "shop::total", "lang": "node",
         "source": "// TODO: rename to handler\nexport function handle(payload) {\n  return { label: 'handler' };\n}\n"})
    rec("run-python-long-output", "a run that prints thousands of lines, each naming an id", RUN,
        {"lang": "python", "code": "import uuid\nfor i in range(4000):\n    print(f\"line {i:04d} rt-{uuid.UUID(int=i)}\")\n"})
    rec("teardown-runtime", "teardown by runtime_id of the kept run", TD, {"runtime_id": rid})
    rec("run-after-teardown", "run on the torn-down runtime: runtime_not_found", RUN, {"runtime_id": rid, "code": "console.log(1)\n"})
    rec("teardown-namespace", "teardown by namespace: every function under it stops resolving", TD, {"namespace": "my-app"})
    rec("teardown-namespace-node", "teardown of the node namespace", TD, {"namespace": "shop::"})
    rec("teardown-unknown", "teardown of an id nothing holds: runtime_not_found", TD, {"runtime_id": rid})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ws://127.0.0.1:49134")
