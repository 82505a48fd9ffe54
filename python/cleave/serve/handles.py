"""The handle-chain data plane: one Ray Serve deployment per part, called through its
DeploymentHandle, tensors moving part to part as resolved responses."""

import asyncio
import concurrent.futures
import time

from . import actors
from .runtime import open_part
from .wire import short_error

PART_MAX_ONGOING = 16


class PartReplica:
    def __init__(self, spec, model_bytes, actor_opts):
        self.spec = spec
        self.session = open_part(spec, model_bytes if model_bytes is not None else spec["file"])
        # What each input takes: numpy dtype name (None when numpy has no such type) and dims,
        # None where dynamic. The ingress checks requests against it before anything runs.
        self.input_specs = self.session.input_specs()
        self.engine = self.session.engine
        self.outputs = list(spec["outputs"])
        # One computation at a time per replica, as on one device; queued requests wait here
        # while the event loop stays free to accept more and to answer health checks.
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.report = actors.part_report(spec, self.session, actor_options=actor_opts)

    def _run(self, feeds, run_options):
        t = time.perf_counter()
        values = self.session.run(self.outputs, feeds, run_options)
        return dict(zip(self.outputs, values)), time.perf_counter() - t

    async def __call__(self, feeds, budget_s=None, *upstream):
        """Runs the part on `feeds` plus what it reads of the `upstream` parts' results (Ray
        Serve hands another part's DeploymentResponse over resolved, worker to worker, without
        the ingress in between), given up after `budget_s` seconds (what is left of the
        request's time) or when the caller cancels: a request still queued never runs, and
        one running is stopped by ONNX Runtime (RunOptions.terminate), so the part's one
        worker is free for the next request instead of finishing work nobody waits for
        (LiteRT cannot stop a started run: there the run finishes, unawaited).

        Returns its outputs, and the report of every part the result went through (its own
        last), so the ingress learns each part's node and compute time from the last parts."""
        feeds = dict(feeds)
        reports = {}
        for r in upstream:
            reports.update(r["parts"])
            for name, value in r["outputs"].items():
                if name in self.spec["inputs"]:
                    feeds.setdefault(name, value)
        missing = [n for n in self.spec["inputs"] if n not in feeds]
        if missing:
            raise RuntimeError(
                f"{self.spec['deployment']} (backend {self.spec['backend']}) was not given {missing[0]!r}"
            )
        run_options = self.session.run_options()
        work = asyncio.get_running_loop().run_in_executor(self.pool, self._run, feeds, run_options)
        try:
            outputs, compute_s = await asyncio.wait_for(work, budget_s)
        except (asyncio.CancelledError, asyncio.TimeoutError):
            run_options.terminate = True
            raise
        except Exception as e:
            # Named here: the ingress may only see this through a later part's arguments.
            raise RuntimeError(
                f"{self.spec['deployment']} (backend {self.spec['backend']}) failed: {short_error(e)}"
            ) from None
        reports[self.spec["deployment"]] = {
            "deployment": self.spec["deployment"],
            "backend": self.spec["backend"],
            "node_id": self.report["node_id"],
            "compute_s": compute_s,
        }
        return {"outputs": outputs, "compute_s": compute_s, "node_id": self.report["node_id"], "parts": reports}

    def inputs(self):
        return self.input_specs

    def describe(self):
        return self.report
