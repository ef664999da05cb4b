"""``vtpu`` command line: ``vtpu info`` prints what this machine's tpu is."""

import argparse
import json


def main(argv=None):
    parser = argparse.ArgumentParser(prog="vtpu", description="PyTorch's tpu device on any Linux machine")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="chip, devices, HBM capacity and the ISA path the kernels use")
    sub.add_parser("demo", help="train a small MLP on tpu next to CPU")
    args = parser.parse_args(argv)
    import vtpu

    if args.cmd == "info":
        print(json.dumps(vtpu.info(), indent=2))
        return 0
    from vtpu import demo

    return demo.main()


if __name__ == "__main__":
    raise SystemExit(main())
