"""obscura simulate: placeholder until its issue lands (replaced by the owning work)."""


def add_parser(sub):
    p = sub.add_parser("simulate", help="(not built yet)")
    p.set_defaults(func=run)


def run(args):
    raise ValueError("'simulate' is not built yet")
