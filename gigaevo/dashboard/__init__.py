"""A local, read-only web dashboard that follows runs live: ``python -m gigaevo.dashboard DIR``.

- ``runs``: the runs under the folders given (a run, a sweep, a folder of runs),
  found again as new jobs appear, each followed by a ``gigaevo.analysis.LiveRun``;
- ``payloads``: the JSON the page asks for (a run's new programs and tallies,
  one program in full, a sweep's comparison);
- ``app``: the Starlette application (GET routes only, assets served from the
  installed packages, nothing fetched from the network);
- ``__main__``: the command line (loopback by default, ``--host`` to opt in).

The page (``static/``) polls the server every second and extends its plots;
see docs/dashboard.md.
"""
