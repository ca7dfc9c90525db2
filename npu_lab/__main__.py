"""Command line: ``python -m npu_lab doctor`` checks the set-up, ``build`` builds the native runtime,
``warmup`` compiles the kernels."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"]:
        import time

        from . import build_error
        from .device import native

        if build_error is not None:
            print(f"npu-lab: {build_error}", file=sys.stderr)
            return 1
        t0 = time.perf_counter()
        path = native.build(verbose="-v" in argv) if not native.is_built() else native.library_path()
        print(f"npu-lab native runtime: {path} ({time.perf_counter() - t0:.1f} s)")
        return 0
    if argv[:1] == ["warmup"]:
        from .warmup import warmup

        print(f"npu-lab kernels compiled and cached in {warmup():.1f} s")
        return 0
    if argv[:1] != ["doctor"]:
        print("usage: python -m npu_lab doctor | build | warmup", file=sys.stderr)
        return 2
    from .diagnose import doctor

    report = doctor()
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
