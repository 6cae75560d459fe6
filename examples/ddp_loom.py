"""DDP on loom: `python3 -m torch.distributed.run --nproc_per_node=2 examples/ddp_loom.py`."""
import torch
import torch.distributed as dist
import loom.torch  # noqa: F401  registers the backend "loom"

dist.init_process_group(backend="loom")  # torchrun's MASTER_ADDR/PORT, RANK, WORLD_SIZE
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(100):
    opt.zero_grad()
    model(torch.randn(32, 16)).square().mean().backward()  # gradients all-reduced on loom
    opt.step()
print(f"rank {dist.get_rank()}: {[p.sum().item() for p in model.parameters()]}")
dist.destroy_process_group()
