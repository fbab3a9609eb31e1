"""A real, small distributed training job reporting through fleetops_client: the tests' harness.

torch on CPU with gloo, a two-layer MLP under DistributedDataParallel, each rank its own data; checkpoints with
torch.distributed.checkpoint (asynchronous by default) every --checkpoint-every steps into --checkpoint-dir, and on
start it resumes from the newest complete one there. It reports through fleetops_client (FLEETOPS_URL, FLEETOPS_TOKEN,
FLEETOPS_RUN from the environment) and keeps its own log of wall-clock stamps (--job-log, JSON lines: restored, step,
checkpoint), which the tests hold FleetOps' figures against. Faults to inject: --slow-rank makes one rank's compute
--slow-factor slower; --sdc-rank scales that rank's local gradients by --sdc-scale before the all-reduce.

Run with torchrun (RANK, WORLD_SIZE, MASTER_ADDR/PORT) or srun (SLURM_PROCID, SLURM_NTASKS; MASTER_ADDR/PORT set).
"""

import argparse
import json
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist

import fleetops_client
from fleetops_client import pytorch as fo


def _log(path: Path | None, rank: int, **entry) -> None:
    if path is not None and rank == 0:
        with path.open("a") as f:
            f.write(json.dumps({"t": time.time(), **entry}) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _latest(directory: Path) -> int | None:
    done = [int(p.name.split("-")[1]) for p in directory.glob("step-*") if (p / ".metadata").exists()]
    return max(done, default=None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=4096, help="samples a rank takes a step")
    parser.add_argument("--step-seconds", type=float, default=0.05, help="compute time a step takes (slept)")
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--sync-checkpoints", action="store_true")
    parser.add_argument("--job-log", type=Path)
    parser.add_argument("--nodes", default="", help="comma-separated node name of each rank (default: the host's)")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-factor", type=float, default=0.3)
    parser.add_argument("--sdc-rank", type=int, default=-1)
    parser.add_argument("--sdc-scale", type=float, default=1.5)
    parser.add_argument("--leave-running", action="store_true", help="end without reporting the run completed")
    parser.add_argument("--pid-dir", type=Path, help="write <node>.<rank>.pid there (a test kills a node's ranks)")
    args = parser.parse_args()

    if "RANK" not in os.environ:  # under srun
        os.environ.update(RANK=os.environ["SLURM_PROCID"], WORLD_SIZE=os.environ["SLURM_NTASKS"])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    nodes = args.nodes.split(",") if args.nodes else []
    node = nodes[rank] if nodes else os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    client = fleetops_client.init(node=node)
    if args.pid_dir is not None:
        args.pid_dir.mkdir(parents=True, exist_ok=True)
        (args.pid_dir / f"{node}.{rank}.pid").write_text(str(os.getpid()))
    checkpoints = dist.new_group(backend="gloo")  # the background writes' collectives, apart from training's

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    fo.watch_ddp(client, model)
    if rank == args.sdc_rank:
        for p in model.parameters():
            p.register_hook(lambda g: g * args.sdc_scale)

    args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    start = _latest(args.checkpoint_dir)
    if start is not None:
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        fo.load(client, start, state, checkpoint_id=args.checkpoint_dir / f"step-{start}")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        _log(args.job_log, rank, event="restored", step=start)
    else:
        start = 0

    data = torch.Generator().manual_seed(1000 + rank)
    weights = torch.randn(64, 1, generator=torch.Generator().manual_seed(7))
    pending = None
    for step in range(start + 1, args.steps + 1):
        x = torch.randn(args.batch, 64, generator=data)
        y = x @ weights + 0.1 * torch.randn(args.batch, 1, generator=data)
        loss = torch.nn.functional.mse_loss(model(x), y)
        time.sleep(args.step_seconds * (1 + args.slow_factor if rank == args.slow_rank else 1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        client.step(step)
        _log(args.job_log, rank, event="step", step=step)
        if step % args.checkpoint_every == 0:
            if pending is not None:
                pending.result()  # one write in flight at a time
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            target = args.checkpoint_dir / f"step-{step}"
            if args.sync_checkpoints:
                fo.save(client, step, state, checkpoint_id=target, process_group=checkpoints)
                _log(args.job_log, rank, event="durable", step=step)
            else:
                pending = fo.async_save(client, step, state, checkpoint_id=target, process_group=checkpoints)
                pending.add_done_callback(
                    lambda f, step=step: f.exception() or _log(args.job_log, rank, event="durable", step=step)
                )
            _log(args.job_log, rank, event="checkpoint", step=step)
    if pending is not None:
        pending.result()
    if not args.leave_running:
        client.completed()
    client.close(timeout=30)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
