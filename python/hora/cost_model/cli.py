"""python -m hora.cost_model: fit the parameters to measurements, or predict a step.

  python -m hora.cost_model fit RECORDS.json... --out PARAMS.json
  python -m hora.cost_model predict --params PARAMS.json (--model cnn|wrn|FILE.py:FN | --sizes N...)
      --ranks-per-host L --link-gbit R [--max-servers K] [--cores-per-host C | --cores C] [--cache-mib M]
      [--ranks 2 4 ...] [--json]
"""

import argparse
import json
import sys

from hora.cost_model import fit, models, predict
from hora.cost_model.cluster import DEFAULT_CACHE_BYTES
from hora.cost_model.params import Params


def load_records(paths):
    """Every record of the files: a file holds one record or {"records": [...]}."""
    records = []
    for path in paths:
        with open(path) as f:
            document = json.load(f)
        records.extend(document["records"] if "records" in document else [document])
    return records


def run_fit(args):
    params, used = fit.fit_params(load_records(args.records), min_network_bytes=args.min_network_bytes)
    document = {"params": params.to_json(), "rows_per_stage": used, "records": args.records}
    with open(args.out, "w") as f:
        json.dump(document, f, indent=1)
    print(json.dumps(document, indent=1) if args.json else format_params(params, used))


def format_params(params, used):
    lines = [f"{name:10s} {value:.4g}" for name, value in params.to_json().items()]
    lines.append("rows per stage: " + ", ".join(f"{stage} {n}" for stage, n in used.items()))
    return "\n".join(lines)


def ms(seconds):
    return f"{seconds * 1e3:.2f}"


def format_table(rows, description):
    out = [description, "",
           "| ranks | hosts | ring ms | recursive doubling ms | hierarchical ms | hora allreduce ms | "
           "ps-sync ms (servers) | ps-async ms (servers) | use |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        s = r.seconds
        out.append(f"| {r.ranks} | {r.hosts} | {ms(s['ring'])} | {ms(s['recursive-doubling'])} | "
                   f"{ms(s['hierarchical'])} | {ms(s['auto'])} | {ms(r.ps_sync[0])} ({r.ps_sync[1]}) | "
                   f"{ms(r.ps_async[0])} ({r.ps_async[1]}) | {r.recommended} |")
    return "\n".join(out)


def run_predict(args):
    sizes = args.sizes or models.gradient_sizes(args.model)
    params = Params.load(args.params)
    rows = predict.predict_table(params, sizes, args.ranks_per_host, args.link_gbit, args.max_servers,
                                 args.cores, args.ranks, args.cache_mib * 2**20, args.cores_per_host)
    if args.json:
        print(json.dumps({"params": params.to_json(), "tensors": len(sizes), "bytes": 4 * sum(sizes),
                          "ranks_per_host": args.ranks_per_host, "link_gbit": args.link_gbit,
                          "cores_per_host": args.cores_per_host, "cores": args.cores,
                          "rows": [vars(r) for r in rows]}, indent=1))
    else:
        print(format_table(rows, f"{len(sizes)} tensors, {4 * sum(sizes) / 2**20:.2f} MiB of float32 gradients; "
                                 f"{args.ranks_per_host} ranks per host, {args.link_gbit:g} Gbit/s links, "
                                 f"{cores_text(args)}, servers on hosts of their own (at most {args.max_servers})."))


def cores_text(args):
    if args.cores is not None:
        return f"every process on {args.cores} shared cores"
    if args.cores_per_host is not None:
        return f"{args.cores_per_host} cores per host"
    return "a core per process"


def parser():
    ap = argparse.ArgumentParser(prog="python -m hora.cost_model", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fit", help="fit the parameters to measurement records")
    f.add_argument("records", nargs="+")
    f.add_argument("--out", required=True)
    f.add_argument("--min-network-bytes", type=int, default=0,
                   help="leave out rows across hosts below this size (a tbf burst passes uncapped)")
    f.add_argument("--json", action="store_true")
    p = sub.add_parser("predict", help="a step's communication time from 2 to 1,024 ranks, and what to use")
    p.add_argument("--params", required=True, help="what `fit` wrote")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help=f"{', '.join(models.PRESETS)} or FILE.py:FUNCTION (needs torch)")
    what.add_argument("--sizes", nargs="+", type=int, help="float32 elements of each gradient tensor")
    p.add_argument("--ranks-per-host", type=int, default=1)
    p.add_argument("--link-gbit", type=float, required=True)
    p.add_argument("--max-servers", type=int, default=16)
    cores = p.add_mutually_exclusive_group()
    cores.add_argument("--cores-per-host", type=int, default=None,
                       help="each host's cores, shared by its ranks (default: a core per process)")
    cores.add_argument("--cores", type=int, default=None,
                       help="cores that every process shares (hosts that are namespaces of one machine)")
    p.add_argument("--cache-mib", type=float, default=DEFAULT_CACHE_BYTES / 2**20,
                   help="each host's last-level cache (default %(default)g)")
    p.add_argument("--ranks", nargs="+", type=int, default=list(predict.RANKS))
    p.add_argument("--json", action="store_true")
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        run_fit(args) if args.command == "fit" else run_predict(args)
    except ValueError as e:
        sys.exit(f"hora.cost_model: {e}")
