"""Plausible wrong answers to milestone B7 (two ranks), as a learner would write them.

Each entry redefines ``train_ddp`` in the namespace of the solved notebook.
"""

_TEMPLATE = '''
def train_ddp(rank, world_size, model, batches, lr):
    device = {device}
    torch.npu.set_device(device)
    model = model.to(device)
    net = {wrap}
    opt = torch.optim.SGD(net.parameters(), lr={lr}, momentum=0.9)
    for x, y in batches:
        xs, ys = {share}
        {zero}
        F.cross_entropy(net(xs.to(device)), ys.to(device){reduction}).backward()
        opt.step()
    return model
'''

_RIGHT = {"device": 'torch.device("npu", rank % torch.npu.device_count())',
          "wrap": "torch.nn.parallel.DistributedDataParallel(model)", "lr": "lr",
          "share": "x.chunk(world_size)[rank], y.chunk(world_size)[rank]", "zero": "opt.zero_grad()",
          "reduction": ""}


def _wrong(**change: str) -> str:
    return _TEMPLATE.format(**{**_RIGHT, **change})


WRONG: dict[str, list[str]] = {
    "b7.ddp": [
        # no DDP: each rank trains alone on its share, nothing is averaged
        _wrong(wrap="model"),
        # every rank trains on the whole batch (DDP's average is then right, but each rank does all the work)
        _wrong(share="x, y"),
        # the share assumes two ranks
        _wrong(share="x.chunk(2)[rank], y.chunk(2)[rank]"),
        # a summed loss: the average over ranks of half-batch sums is half the full batch's sum, not its mean
        _wrong(reduction=', reduction="sum"'),
        # every rank on the first device
        _wrong(device='torch.device("npu", 0)'),
        # shares that overlap: rank r starts at row r
        _wrong(share="x[rank:rank + len(x) // world_size], y[rank:rank + len(y) // world_size]"),
        # the learning rate scaled by the number of ranks (a rule for a larger global batch, misapplied here)
        _wrong(lr="lr * world_size"),
        # the gradients accumulate over the steps
        _wrong(zero="pass"),
    ],
}
