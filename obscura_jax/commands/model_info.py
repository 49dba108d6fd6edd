"""obscura model-info: placeholder until its issue lands (replaced by the owning work)."""


def add_parser(sub):
    p = sub.add_parser("model-info", help="(not built yet)")
    p.set_defaults(func=run)


def run(args):
    raise ValueError("'model-info' is not built yet")
