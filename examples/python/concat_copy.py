"""The cheapest correct kernel: concat as two slice copies (NumPy on the CPU, or torch on a device). Campaigns of
it against the built-in cpu.concat.copy on the same cases measure what the worker protocol costs per case (the
round trip, the arena copies, rebuilding the views, and for --tensors torch the copies to and from the device).

--planted-bug halves_swapped: b is copied before a (the concat order of the drafter input).
"""

import argparse

import driftcheck as dc

parser = argparse.ArgumentParser()
parser.add_argument("--tensors", choices=["numpy", "torch"], default="numpy")
parser.add_argument("--device", default="cpu")
parser.add_argument("--planted-bug", choices=["halves_swapped"])
args = parser.parse_args()


@dc.concat(tensors=args.tensors, device=args.device)
def concat(case):
    a, b = (case.b, case.a) if args.planted_bug == "halves_swapped" else (case.a, case.b)
    wa = a.shape[1]
    case.out[:, :wa] = a
    case.out[:, wa:] = b


if __name__ == "__main__":
    dc.serve()
