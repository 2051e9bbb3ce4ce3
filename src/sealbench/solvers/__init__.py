"""Reference solvers for the bundled example, each run as ``python -m sealbench.solvers.NAME``.

They bracket what a real agent can do, so the null pack and the metric can be checked against
known behaviour: ``do_nothing`` is the floor, ``rulebook`` an honest repair agent, and
``gullible`` the same agent minus its scruples, which the must-fail and must-refuse controls
exist to catch.
"""
