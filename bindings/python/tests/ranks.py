"""Ranks in processes of their own, as users start them: RankPool(n) spawns n processes (spawn,
not fork: torch's threads do not survive a fork), hands each the pickled loom.UniqueId made
here, and each joins a communicator of n ranks. pool.run(fn, *args) runs fn(comm, *args) on
every rank at once and returns the results by rank, or fails with the ranks' tracebacks. fn
must be a module-level function (the ranks import it by name)."""
import multiprocessing
import os
import time
import traceback

import loom

# Every wait in the ranks has this deadline, so a broken test fails instead of hanging.
COMM_TIMEOUT_S = 30


def _serve(conn, uid, rank, size, env, timeout):
    os.environ.update(env)
    try:
        if uid is None:
            comm = loom.Communicator.from_env(timeout=timeout)
        else:
            comm = loom.Communicator(uid, rank, size, timeout=timeout)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ok", None))
    while True:
        task = conn.recv()
        if task is None:
            break
        fn, args = task
        try:
            conn.send(("ok", fn(comm, *args)))
        except BaseException:
            conn.send(("error", traceback.format_exc()))
    comm.destroy()
    conn.send(("ok", None))


class RankPool:
    """n ranks. envs: per rank, variables set in its process before it joins; from_env: they
    join with loom.Communicator.from_env() instead of a unique id; comm_timeout: the
    communicator's deadline, in seconds."""

    def __init__(self, size, envs=None, from_env=False, comm_timeout=COMM_TIMEOUT_S,
                 timeout=120):
        context = multiprocessing.get_context("spawn")
        uid = None if from_env else loom.UniqueId()
        self.size = size
        self.conns, self.procs = [], []
        for rank in range(size):
            mine, theirs = context.Pipe()
            env = envs[rank] if envs else {}
            proc = context.Process(target=_serve,
                                   args=(theirs, uid, rank, size, env, comm_timeout),
                                   daemon=True)
            proc.start()
            self.conns.append(mine)
            self.procs.append(proc)
        self._collect(range(size), timeout)

    def _collect(self, ranks, timeout):
        """Each rank's answer, waiting until the deadline; fails with the ranks' errors."""
        deadline = time.monotonic() + timeout
        results, errors = {}, []
        for rank in ranks:
            conn = self.conns[rank]
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                errors.append(f"rank {rank}: no answer within {timeout} s")
                continue
            try:
                status, value = conn.recv()
            except EOFError:
                errors.append(f"rank {rank}: its process ended "
                              f"(exit code {self.procs[rank].exitcode})")
                continue
            if status == "ok":
                results[rank] = value
            else:
                errors.append(f"rank {rank}:\n{value}")
        if errors:
            raise AssertionError("\n".join(errors))
        return [results[r] for r in ranks]

    def run(self, fn, *args, ranks=None, timeout=120):
        """fn(comm, *args) on each rank of ranks (all by default); their results by rank."""
        ranks = range(self.size) if ranks is None else ranks
        for rank in ranks:
            self.conns[rank].send((fn, args))
        return self._collect(ranks, timeout)

    def close(self, timeout=60):
        """Destroys the ranks' communicators (failing if one cannot) and ends the processes."""
        try:
            for conn in self.conns:
                conn.send(None)
            self._collect(range(self.size), timeout)
        finally:
            self.kill()

    def kill(self):
        """Ends the ranks' processes as they are."""
        for proc in self.procs:
            proc.join(1)
            if proc.is_alive():
                proc.kill()
                proc.join()
