from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PythonMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PYTHON_AUTO: _ClassVar[PythonMode]
    PYTHON_OFF: _ClassVar[PythonMode]
    PYTHON_ON: _ClassVar[PythonMode]

class GpuProbes(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GPU_AUTO: _ClassVar[GpuProbes]
    GPU_OFF: _ClassVar[GpuProbes]
    GPU_ON: _ClassVar[GpuProbes]

class GpuActivity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GPU_ACTIVITY_AUTO: _ClassVar[GpuActivity]
    GPU_ACTIVITY_OFF: _ClassVar[GpuActivity]
    GPU_ACTIVITY_ON: _ClassVar[GpuActivity]

class CallPathMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODE_DEFAULT: _ClassVar[CallPathMode]
    MODE_EXACT: _ClassVar[CallPathMode]
    MODE_SAMPLED: _ClassVar[CallPathMode]
PYTHON_AUTO: PythonMode
PYTHON_OFF: PythonMode
PYTHON_ON: PythonMode
GPU_AUTO: GpuProbes
GPU_OFF: GpuProbes
GPU_ON: GpuProbes
GPU_ACTIVITY_AUTO: GpuActivity
GPU_ACTIVITY_OFF: GpuActivity
GPU_ACTIVITY_ON: GpuActivity
MODE_DEFAULT: CallPathMode
MODE_EXACT: CallPathMode
MODE_SAMPLED: CallPathMode

class TopRequest(_message.Message):
    __slots__ = ("since_unix", "until_unix", "n", "sort")
    SINCE_UNIX_FIELD_NUMBER: _ClassVar[int]
    UNTIL_UNIX_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    SORT_FIELD_NUMBER: _ClassVar[int]
    since_unix: float
    until_unix: float
    n: int
    sort: str
    def __init__(self, since_unix: _Optional[float] = ..., until_unix: _Optional[float] = ..., n: _Optional[int] = ..., sort: _Optional[str] = ...) -> None: ...

class TopProcess(_message.Message):
    __slots__ = ("host", "pid", "command", "container", "windows", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    host: str
    pid: int
    command: str
    container: str
    windows: int
    metrics: _containers.ScalarMap[str, int]
    def __init__(self, host: _Optional[str] = ..., pid: _Optional[int] = ..., command: _Optional[str] = ..., container: _Optional[str] = ..., windows: _Optional[int] = ..., metrics: _Optional[_Mapping[str, int]] = ...) -> None: ...

class TopKernel(_message.Message):
    __slots__ = ("name", "processes", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    name: str
    processes: int
    metrics: _containers.ScalarMap[str, int]
    def __init__(self, name: _Optional[str] = ..., processes: _Optional[int] = ..., metrics: _Optional[_Mapping[str, int]] = ...) -> None: ...

class TopLine(_message.Message):
    __slots__ = ("file", "line", "function", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    file: str
    line: int
    function: str
    metrics: _containers.ScalarMap[str, int]
    def __init__(self, file: _Optional[str] = ..., line: _Optional[int] = ..., function: _Optional[str] = ..., metrics: _Optional[_Mapping[str, int]] = ...) -> None: ...

class TopReply(_message.Message):
    __slots__ = ("since_unix", "until_unix", "windows", "sort", "kernel_sort", "processes", "kernels", "lines")
    SINCE_UNIX_FIELD_NUMBER: _ClassVar[int]
    UNTIL_UNIX_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    SORT_FIELD_NUMBER: _ClassVar[int]
    KERNEL_SORT_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    since_unix: float
    until_unix: float
    windows: int
    sort: str
    kernel_sort: str
    processes: _containers.RepeatedCompositeFieldContainer[TopProcess]
    kernels: _containers.RepeatedCompositeFieldContainer[TopKernel]
    lines: _containers.RepeatedCompositeFieldContainer[TopLine]
    def __init__(self, since_unix: _Optional[float] = ..., until_unix: _Optional[float] = ..., windows: _Optional[int] = ..., sort: _Optional[str] = ..., kernel_sort: _Optional[str] = ..., processes: _Optional[_Iterable[_Union[TopProcess, _Mapping]]] = ..., kernels: _Optional[_Iterable[_Union[TopKernel, _Mapping]]] = ..., lines: _Optional[_Iterable[_Union[TopLine, _Mapping]]] = ...) -> None: ...

class QueryProfileRequest(_message.Message):
    __slots__ = ("since_unix", "until_unix", "pid", "command", "container")
    SINCE_UNIX_FIELD_NUMBER: _ClassVar[int]
    UNTIL_UNIX_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    since_unix: float
    until_unix: float
    pid: int
    command: str
    container: str
    def __init__(self, since_unix: _Optional[float] = ..., until_unix: _Optional[float] = ..., pid: _Optional[int] = ..., command: _Optional[str] = ..., container: _Optional[str] = ...) -> None: ...

class QueryProfileReply(_message.Message):
    __slots__ = ("profile", "windows")
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    profile: Profile
    windows: int
    def __init__(self, profile: _Optional[_Union[Profile, _Mapping]] = ..., windows: _Optional[int] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("pid",)
    PID_FIELD_NUMBER: _ClassVar[int]
    pid: int
    def __init__(self, pid: _Optional[int] = ...) -> None: ...

class StopReply(_message.Message):
    __slots__ = ("stopped",)
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    stopped: int
    def __init__(self, stopped: _Optional[int] = ...) -> None: ...

class AttachRequest(_message.Message):
    __slots__ = ("pid", "duration_s", "sample_hz", "kernel_stacks", "python", "native_python", "gpu", "mode", "gpu_activity", "trace", "gpu_duty", "gpu_duty_period_s", "pc_sampling")
    PID_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_HZ_FIELD_NUMBER: _ClassVar[int]
    KERNEL_STACKS_FIELD_NUMBER: _ClassVar[int]
    PYTHON_FIELD_NUMBER: _ClassVar[int]
    NATIVE_PYTHON_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    GPU_ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    GPU_DUTY_FIELD_NUMBER: _ClassVar[int]
    GPU_DUTY_PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    PC_SAMPLING_FIELD_NUMBER: _ClassVar[int]
    pid: int
    duration_s: float
    sample_hz: int
    kernel_stacks: bool
    python: PythonMode
    native_python: bool
    gpu: GpuProbes
    mode: CallPathMode
    gpu_activity: GpuActivity
    trace: bool
    gpu_duty: float
    gpu_duty_period_s: float
    pc_sampling: PcSampling
    def __init__(self, pid: _Optional[int] = ..., duration_s: _Optional[float] = ..., sample_hz: _Optional[int] = ..., kernel_stacks: _Optional[bool] = ..., python: _Optional[_Union[PythonMode, str]] = ..., native_python: _Optional[bool] = ..., gpu: _Optional[_Union[GpuProbes, str]] = ..., mode: _Optional[_Union[CallPathMode, str]] = ..., gpu_activity: _Optional[_Union[GpuActivity, str]] = ..., trace: _Optional[bool] = ..., gpu_duty: _Optional[float] = ..., gpu_duty_period_s: _Optional[float] = ..., pc_sampling: _Optional[_Union[PcSampling, _Mapping]] = ...) -> None: ...

class PcSampling(_message.Message):
    __slots__ = ("kernel", "period", "duration_ms")
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    PERIOD_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    kernel: str
    period: int
    duration_ms: int
    def __init__(self, kernel: _Optional[str] = ..., period: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class AttachEvent(_message.Message):
    __slots__ = ("progress", "profile")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    progress: Progress
    profile: Profile
    def __init__(self, progress: _Optional[_Union[Progress, _Mapping]] = ..., profile: _Optional[_Union[Profile, _Mapping]] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("elapsed_s", "duration_s", "samples", "message")
    ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    elapsed_s: float
    duration_s: float
    samples: int
    message: str
    def __init__(self, elapsed_s: _Optional[float] = ..., duration_s: _Optional[float] = ..., samples: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class Profile(_message.Message):
    __slots__ = ("schema", "pid", "command", "duration_s", "metrics", "nodes", "stats", "warnings", "sample_hz", "ended", "started_unix", "hostname", "mode", "trace", "compiles")
    class StatsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_HZ_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    COMPILES_FIELD_NUMBER: _ClassVar[int]
    schema: str
    pid: int
    command: str
    duration_s: float
    metrics: _containers.RepeatedScalarFieldContainer[str]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    stats: _containers.ScalarMap[str, int]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    sample_hz: int
    ended: str
    started_unix: float
    hostname: str
    mode: str
    trace: _containers.RepeatedCompositeFieldContainer[TraceEvent]
    compiles: _containers.RepeatedCompositeFieldContainer[Compile]
    def __init__(self, schema: _Optional[str] = ..., pid: _Optional[int] = ..., command: _Optional[str] = ..., duration_s: _Optional[float] = ..., metrics: _Optional[_Iterable[str]] = ..., nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., stats: _Optional[_Mapping[str, int]] = ..., warnings: _Optional[_Iterable[str]] = ..., sample_hz: _Optional[int] = ..., ended: _Optional[str] = ..., started_unix: _Optional[float] = ..., hostname: _Optional[str] = ..., mode: _Optional[str] = ..., trace: _Optional[_Iterable[_Union[TraceEvent, _Mapping]]] = ..., compiles: _Optional[_Iterable[_Union[Compile, _Mapping]]] = ...) -> None: ...

class SourceLine(_message.Message):
    __slots__ = ("file", "line", "function", "code")
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    file: str
    line: int
    function: str
    code: str
    def __init__(self, file: _Optional[str] = ..., line: _Optional[int] = ..., function: _Optional[str] = ..., code: _Optional[str] = ...) -> None: ...

class CompiledFrom(_message.Message):
    __slots__ = ("lines", "nodes", "aten", "compile_id", "output_code", "framework", "bytes_per_launch")
    LINES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    ATEN_FIELD_NUMBER: _ClassVar[int]
    COMPILE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_CODE_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_LAUNCH_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[SourceLine]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    aten: _containers.RepeatedScalarFieldContainer[str]
    compile_id: str
    output_code: str
    framework: str
    bytes_per_launch: int
    def __init__(self, lines: _Optional[_Iterable[_Union[SourceLine, _Mapping]]] = ..., nodes: _Optional[_Iterable[str]] = ..., aten: _Optional[_Iterable[str]] = ..., compile_id: _Optional[str] = ..., output_code: _Optional[str] = ..., framework: _Optional[str] = ..., bytes_per_launch: _Optional[int] = ...) -> None: ...

class GpuBranch(_message.Message):
    __slots__ = ("offset", "instruction", "file", "line", "kind", "lanes", "predicate", "source", "reconverge", "taken", "fallthrough", "block_x")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LANES_FIELD_NUMBER: _ClassVar[int]
    PREDICATE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    RECONVERGE_FIELD_NUMBER: _ClassVar[int]
    TAKEN_FIELD_NUMBER: _ClassVar[int]
    FALLTHROUGH_FIELD_NUMBER: _ClassVar[int]
    BLOCK_X_FIELD_NUMBER: _ClassVar[int]
    offset: int
    instruction: str
    file: str
    line: int
    kind: str
    lanes: str
    predicate: str
    source: str
    reconverge: int
    taken: _containers.RepeatedScalarFieldContainer[int]
    fallthrough: _containers.RepeatedScalarFieldContainer[int]
    block_x: int
    def __init__(self, offset: _Optional[int] = ..., instruction: _Optional[str] = ..., file: _Optional[str] = ..., line: _Optional[int] = ..., kind: _Optional[str] = ..., lanes: _Optional[str] = ..., predicate: _Optional[str] = ..., source: _Optional[str] = ..., reconverge: _Optional[int] = ..., taken: _Optional[_Iterable[int]] = ..., fallthrough: _Optional[_Iterable[int]] = ..., block_x: _Optional[int] = ...) -> None: ...

class Compile(_message.Message):
    __slots__ = ("id", "function", "file", "line", "recompile_reason", "fail_reason", "graph_breaks", "time_s", "ops", "called_from", "start_unix")
    ID_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    RECOMPILE_REASON_FIELD_NUMBER: _ClassVar[int]
    FAIL_REASON_FIELD_NUMBER: _ClassVar[int]
    GRAPH_BREAKS_FIELD_NUMBER: _ClassVar[int]
    TIME_S_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    CALLED_FROM_FIELD_NUMBER: _ClassVar[int]
    START_UNIX_FIELD_NUMBER: _ClassVar[int]
    id: str
    function: str
    file: str
    line: int
    recompile_reason: str
    fail_reason: str
    graph_breaks: _containers.RepeatedCompositeFieldContainer[GraphBreak]
    time_s: float
    ops: int
    called_from: SourceLine
    start_unix: float
    def __init__(self, id: _Optional[str] = ..., function: _Optional[str] = ..., file: _Optional[str] = ..., line: _Optional[int] = ..., recompile_reason: _Optional[str] = ..., fail_reason: _Optional[str] = ..., graph_breaks: _Optional[_Iterable[_Union[GraphBreak, _Mapping]]] = ..., time_s: _Optional[float] = ..., ops: _Optional[int] = ..., called_from: _Optional[_Union[SourceLine, _Mapping]] = ..., start_unix: _Optional[float] = ...) -> None: ...

class GraphBreak(_message.Message):
    __slots__ = ("file", "line", "reason")
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    file: str
    line: int
    reason: str
    def __init__(self, file: _Optional[str] = ..., line: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class TraceEvent(_message.Message):
    __slots__ = ("kind", "name", "tid", "device", "stream", "start_ns", "dur_ns", "correlation", "bytes", "graph_node", "at")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    DUR_NS_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    GRAPH_NODE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    tid: int
    device: int
    stream: int
    start_ns: int
    dur_ns: int
    correlation: int
    bytes: int
    graph_node: int
    at: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., tid: _Optional[int] = ..., device: _Optional[int] = ..., stream: _Optional[int] = ..., start_ns: _Optional[int] = ..., dur_ns: _Optional[int] = ..., correlation: _Optional[int] = ..., bytes: _Optional[int] = ..., graph_node: _Optional[int] = ..., at: _Optional[str] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("parent", "kind", "name", "file", "line", "module", "metrics", "tid", "grid", "block", "shared_mem", "stream", "registers", "static_shared", "compiled_from", "branches")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    MODULE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    TID_FIELD_NUMBER: _ClassVar[int]
    GRID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    SHARED_MEM_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    REGISTERS_FIELD_NUMBER: _ClassVar[int]
    STATIC_SHARED_FIELD_NUMBER: _ClassVar[int]
    COMPILED_FROM_FIELD_NUMBER: _ClassVar[int]
    BRANCHES_FIELD_NUMBER: _ClassVar[int]
    parent: int
    kind: str
    name: str
    file: str
    line: int
    module: str
    metrics: _containers.RepeatedScalarFieldContainer[int]
    tid: int
    grid: _containers.RepeatedScalarFieldContainer[int]
    block: _containers.RepeatedScalarFieldContainer[int]
    shared_mem: int
    stream: int
    registers: int
    static_shared: int
    compiled_from: CompiledFrom
    branches: _containers.RepeatedCompositeFieldContainer[GpuBranch]
    def __init__(self, parent: _Optional[int] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., file: _Optional[str] = ..., line: _Optional[int] = ..., module: _Optional[str] = ..., metrics: _Optional[_Iterable[int]] = ..., tid: _Optional[int] = ..., grid: _Optional[_Iterable[int]] = ..., block: _Optional[_Iterable[int]] = ..., shared_mem: _Optional[int] = ..., stream: _Optional[int] = ..., registers: _Optional[int] = ..., static_shared: _Optional[int] = ..., compiled_from: _Optional[_Union[CompiledFrom, _Mapping]] = ..., branches: _Optional[_Iterable[_Union[GpuBranch, _Mapping]]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Session(_message.Message):
    __slots__ = ("id", "pid", "command", "started_unix", "duration_s", "sample_hz", "probes", "stats", "state", "warnings")
    class StatsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_HZ_FIELD_NUMBER: _ClassVar[int]
    PROBES_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    id: int
    pid: int
    command: str
    started_unix: float
    duration_s: float
    sample_hz: int
    probes: _containers.RepeatedScalarFieldContainer[str]
    stats: _containers.ScalarMap[str, int]
    state: str
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[int] = ..., pid: _Optional[int] = ..., command: _Optional[str] = ..., started_unix: _Optional[float] = ..., duration_s: _Optional[float] = ..., sample_hz: _Optional[int] = ..., probes: _Optional[_Iterable[str]] = ..., stats: _Optional[_Mapping[str, int]] = ..., state: _Optional[str] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("version", "daemon_pid", "uptime_s", "kernel", "bcc_version", "sessions", "totals", "socket", "max_duration_s", "default_sample_hz", "max_sample_hz")
    class TotalsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DAEMON_PID_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    BCC_VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    SOCKET_FIELD_NUMBER: _ClassVar[int]
    MAX_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_SAMPLE_HZ_FIELD_NUMBER: _ClassVar[int]
    MAX_SAMPLE_HZ_FIELD_NUMBER: _ClassVar[int]
    version: str
    daemon_pid: int
    uptime_s: float
    kernel: str
    bcc_version: str
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    totals: _containers.ScalarMap[str, int]
    socket: str
    max_duration_s: float
    default_sample_hz: int
    max_sample_hz: int
    def __init__(self, version: _Optional[str] = ..., daemon_pid: _Optional[int] = ..., uptime_s: _Optional[float] = ..., kernel: _Optional[str] = ..., bcc_version: _Optional[str] = ..., sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ..., totals: _Optional[_Mapping[str, int]] = ..., socket: _Optional[str] = ..., max_duration_s: _Optional[float] = ..., default_sample_hz: _Optional[int] = ..., max_sample_hz: _Optional[int] = ...) -> None: ...

class ListProcessesRequest(_message.Message):
    __slots__ = ("all",)
    ALL_FIELD_NUMBER: _ClassVar[int]
    all: bool
    def __init__(self, all: _Optional[bool] = ...) -> None: ...

class ProcessEntry(_message.Message):
    __slots__ = ("pid", "user", "command", "python_version", "gpu_libraries", "profiled")
    PID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    PYTHON_VERSION_FIELD_NUMBER: _ClassVar[int]
    GPU_LIBRARIES_FIELD_NUMBER: _ClassVar[int]
    PROFILED_FIELD_NUMBER: _ClassVar[int]
    pid: int
    user: str
    command: str
    python_version: str
    gpu_libraries: _containers.RepeatedScalarFieldContainer[str]
    profiled: bool
    def __init__(self, pid: _Optional[int] = ..., user: _Optional[str] = ..., command: _Optional[str] = ..., python_version: _Optional[str] = ..., gpu_libraries: _Optional[_Iterable[str]] = ..., profiled: _Optional[bool] = ...) -> None: ...

class ListProcessesReply(_message.Message):
    __slots__ = ("processes",)
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    processes: _containers.RepeatedCompositeFieldContainer[ProcessEntry]
    def __init__(self, processes: _Optional[_Iterable[_Union[ProcessEntry, _Mapping]]] = ...) -> None: ...
