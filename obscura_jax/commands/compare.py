"""obscura compare: placeholder until its issue lands (replaced by the owning work)."""


def add_parser(sub):
    p = sub.add_parser("compare", help="(not built yet)")
    p.set_defaults(func=run)


def run(args):
    raise ValueError("'compare' is not built yet")
