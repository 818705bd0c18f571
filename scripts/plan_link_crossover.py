#!/usr/bin/env python3
"""gpipe-plan's link crossover against the link study's measured one
(docs/scaling-studies.md, "How slow a link does a pipeline tolerate?";
measured values copied from its table): for each deck and M at K = 2, the
bandwidth (latency 2 us) at which predicted samples/s falls to 90 % of the
prediction on this machine's shared memory, found by bisection in log
bandwidth. A prediction, printed as a markdown table
(docs/performance-model.md, "Against the link study").

    scripts/plan_link_crossover.py      (run from the repository root, after building)
"""
import json, subprocess, math
def sps(deck, M, extra):
    out=subprocess.run(["build/apps/gpipe-plan", deck, "--ranks", "2", "--json", "--set", f"training.micro_batches={M}"]+extra, capture_output=True, text=True, check=True).stdout
    return json.loads(out)["samples_per_s"]
meas={("deep_mlp",1):0.66,("deep_mlp",4):0.36,("deep_mlp",8):0.80,("deep_mlp",16):0.35,("fashion_mnist_mlp",1):2.18,("fashion_mnist_mlp",4):0.75,("fashion_mnist_mlp",8):0.85,("fashion_mnist_mlp",16):0.75}
print("| deck | M | measured crossover (Gb/s) | simple prediction (Gb/s) | gpipe-plan (Gb/s) |")
simple={("deep_mlp",1):0.24,("deep_mlp",4):0.18,("deep_mlp",8):0.15,("deep_mlp",16):0.12,("fashion_mnist_mlp",1):1.09,("fashion_mnist_mlp",4):0.61,("fashion_mnist_mlp",8):0.81,("fashion_mnist_mlp",16):0.57}
print("|---|---|---|---|---|")
for (d,M),m in meas.items():
    deck=f"inputs/{d}.yaml"
    base=sps(deck,M,["--link","shm"])
    lo,hi=math.log(1e-3),math.log(1e3)  # Gb/s
    for _ in range(30):
        mid=(lo+hi)/2
        s=sps(deck,M,["--latency-us","2","--bandwidth-GBps",str(math.exp(mid)/8)])
        if s<0.9*base: lo=mid
        else: hi=mid
    print(f"| {d} | {M} | {m} | {simple[(d,M)]} | {math.exp(hi):.2f} |")
