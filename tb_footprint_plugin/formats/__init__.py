"""TensorBoard's formats and readers, below both the transforms and the verification.

* ``views`` — ``read_view``: what TensorBoard's own readers (the Python multiplexer, the Rust
  data server) show for one run, through the DataProvider API.
* ``graph_attrs`` — the graph attribute values the Graphs dashboard lists as too large to show,
  by TensorBoard's own processing (the rewrite drops them, the verification compares by them).

The rewrite (``transforms``) reads a run's default view before it selects; the verification
(``verify``) compares views: both use these, neither imports the other's side.
"""
