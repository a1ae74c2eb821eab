"""Writers of synthetic but faithful TensorBoard and profiler data (demo logdir, tests, benches).

Everything here is deterministic: no clock, host name or pid is ever read; all of them are
parameters with fixed defaults, and all randomness comes from ``random.Random(seed)``.

What "faithful" means, measured against ``/work/shared/fixtures/real`` (real writers' output):

* Event files are framed by TensorBoard's own ``RecordWriter`` and hold ``Event`` protos built
  with TensorBoard's own protos and ``metadata.create_summary_metadata`` helpers, in the shapes
  the real writers use: TF 2.x tensor summaries (scalars as a 4-byte ``tensor_content``,
  30x3 double histograms, ``[w, h, png...]`` image string tensors), TF1/PyTorch legacy
  ``Summary.Value`` fields (``simple_value``, ``histo``, ``image``, ``audio``), ``graph_def``,
  ``meta_graph_def``, ``tagged_run_metadata``, ``session_log`` and hparams.
  Note: TF 2.21 puts the ``SummaryMetadata`` on *every* value (12,080 of 12,080 scalar values in
  ``tf/summary_mix``), so ``metadata="every"`` is the default; ``"first"`` mimics TF1's
  ``FileWriter`` which strips it after the first value of a tag.
* XSpace files (``<host>.xplane.pb``) use the field numbers of ``tsl/profiler/protobuf/xplane.proto``
  and are encoded by a small hand-written protobuf wire encoder, so they can be written without
  xprof installed. ``xplane_proto_classes()`` gives real protobuf classes (from an importable
  ``xplane_pb2`` or from the descriptor compiled into the installed xprof native library) to check
  and cross-encode them; the tests also open the files with xprof's real profile plugin.
* PyTorch traces reproduce kineto's layout (its odd pretty-printing included) and are streamed.

Modules: ``common`` (fixed identities), ``media`` (PNG, WAV), ``events`` (event files and
their protos), ``xprof`` (profile sessions, XSpace, secondary traces), ``torch_trace`` (PyTorch
traces). API: ``make_png``, ``make_wav``, ``make_graph_def``, ``make_run_metadata``, ``make_meta_graph_def``,
``keras_model_config``; ``event_file_name``, ``EventWriter``, ``write_profile_empty``;
``build_host_xspace``, ``encode_xspace_wire``, ``encode_xspace_proto``, ``xplane_proto_classes``,
``xspace_bytes``, ``write_xplane``, ``write_trace_json_gz``, ``write_perfetto_trace_json_gz``,
``session_name_for``, ``write_profile_session``; ``torch_trace_name``, ``write_torch_trace``;
``projects``: ``write_tbx_histogram_run``, ``write_profiled_project``, ``protected_digests``, ``age``.

Not faithful (by design): values are plausible, not from a real model; the XSpace holds only
host planes (no device/TPU/GPU planes, no HLO modules, so no ``graph_viewer``/``memory_viewer``
tools); xprof's binary caches (``*.SSTABLE``, ``op_stats_v2.pb``) are opaque filler marked stale.
"""
from tb_footprint_plugin.synth.common import (  # noqa: F401  (re-exported: the package's API)
    DEFAULT_HOST,
    DEFAULT_PID,
    DEFAULT_TIMESTAMP,
    FILE_VERSION,
    HOST_ONLY_TOOLS,
    STALE_CACHE_VERSION,
    TB_SOURCE_WRITER,
    TF_SOURCE_WRITER,
    XPROF_VERSION,
)
from tb_footprint_plugin.synth.media import (  # noqa: F401  (re-exported: the package's API)
    make_png,
    make_wav,
)
from tb_footprint_plugin.synth.events import (  # noqa: F401  (re-exported: the package's API)
    EventWriter,
    FastRecordWriter,
    event_file_name,
    keras_model_config,
    legacy_histogram_proto,
    make_graph_def,
    make_meta_graph_def,
    make_run_metadata,
    write_profile_empty,
)
from tb_footprint_plugin.synth.xprof import (  # noqa: F401  (re-exported: the package's API)
    Event,
    Stat,
    XLineModel,
    XPLANE_FIELDS,
    XPlaneClasses,
    XPlaneModel,
    XSpaceModel,
    build_host_xspace,
    encode_xspace_proto,
    encode_xspace_wire,
    session_name_for,
    write_perfetto_trace_json_gz,
    write_profile_session,
    write_trace_json_gz,
    write_xplane,
    xplane_proto_classes,
    xspace_bytes,
)
from tb_footprint_plugin.synth.torch_trace import (  # noqa: F401  (re-exported: the package's API)
    torch_trace_name,
    write_torch_trace,
)
from tb_footprint_plugin.synth.projects import (  # noqa: F401  (re-exported: the package's API)
    PROJECT_SHARES,
    age,
    protected_digests,
    write_profiled_project,
    write_tbx_histogram_run,
)
