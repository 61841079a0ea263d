# Tests of the Julia bindings. Run from the repository root:
#   CKPT_LIB=<build>/runtime/libckpt.so julia --project=bindings/julia bindings/julia/test/runtests.jl
# (or Pkg.test("Ckpt") with CKPT_LIB set). The two-rank test starts two Julia processes.

using Test
using Sockets
using Ckpt
using Ckpt: LibCkpt

const PACKAGE_DIR = dirname(@__DIR__)
const WORKER = joinpath(@__DIR__, "two_rank_worker.jl")

# The default staging arena (an eighth of the machine's memory) costs seconds of page setup per context; the tests
# stage a few KiB. Set before any context exists; the two-rank workers inherit it.
const TEST_ARENA_BYTES = 64 << 20
get!(ENV, "CKPT_ARENA_BYTES", string(TEST_ARENA_BYTES))

"""The status of the CkptError `f()` throws, or CKPT_OK if it throws nothing."""
function failure_status(f)
    try
        f()
    catch failure
        failure isa CkptError && return failure.status
        rethrow()
    end
    return CKPT_OK
end

fields_equal(a::T, b::T) where {T} = all(getfield(a, f) == getfield(b, f) for f in fieldnames(T))

"""Saves `tensors` (key => array) as a one-rank checkpoint at `path`, with a common entry and a metadata pair."""
function save_one_rank(ctx, path, tensors...)
    state = State()
    for (key, data) in tensors
        add_tensor!(state, key, data)
    end
    add_common!(state, "step", "1200")
    add_object!(state, "blob", Vector{UInt8}("opaque bytes"))
    request = Ckpt.save(ctx, state, path; metadata = ["framework" => "julia"])
    done = wait(request)
    close(request)
    close(state)
    return done
end

"""The safetensors file at `path` as its JSON header (padding removed) and its data, which must start at a multiple
of 4096 bytes, as ckpt aligns it."""
function read_safetensors(path)
    bytes = read(path)
    data_start = 8 + Int(ltoh(reinterpret(UInt64, bytes[1:8])[1]))
    @test data_start % 4096 == 0
    return rstrip(String(bytes[9:data_start])), bytes[data_start+1:end]
end

"""The data of tensor `key` of a safetensors file, after checking that its header entry (compact JSON, as ckpt
writes it) names `dtype` and `shape` ("[6,4]")."""
function safetensors_tensor(header, data, key, dtype, shape)
    entry = "\"$key\":{\"dtype\":\"$dtype\",\"shape\":$shape,\"data_offsets\":["
    at = findfirst(entry, header)
    @test at !== nothing
    at === nothing && return UInt8[]
    first_byte, end_byte = parse.(Int, split(split(header[last(at)+1:end], ']')[1], ','))
    return data[first_byte+1:end_byte]
end

@testset "Ckpt" begin

@testset "loaded library matches the header version" begin
    @test LibCkpt.ckpt_version_number() == LibCkpt.CKPT_VERSION_NUMBER
    @test Ckpt.version() == VersionNumber(LibCkpt.CKPT_VERSION_MAJOR, LibCkpt.CKPT_VERSION_MINOR,
                                          LibCkpt.CKPT_VERSION_PATCH)
end

@testset "structs and constants match the ABI table" begin
    # The table the C build generates from ckpt.h; tools/check_julia_layouts.py checks the same without julia.
    table = get(ENV, "CKPT_ABI_TABLE", joinpath(PACKAGE_DIR, "..", "..", "build", "abi", "ckpt_abi.tsv"))
    @test isfile(table)
    if isfile(table)
        for line in eachline(table)
            cells = split(line, '\t')
            if cells[1] == "struct"
                @test sizeof(getfield(LibCkpt, Symbol(cells[2]))) == parse(Int, cells[3])
            elseif cells[1] == "field"
                T = getfield(LibCkpt, Symbol(cells[2]))
                i = findfirst(==(Symbol(cells[3])), fieldnames(T))
                @test i !== nothing && fieldoffset(T, i) == parse(Int, cells[4]) &&
                      sizeof(fieldtype(T, i)) == parse(Int, cells[5])
            elseif cells[1] == "constant"
                name = Symbol(cells[2])
                @test isdefined(LibCkpt, name) && getfield(LibCkpt, name) == parse(Int, cells[3])
            end
        end
    end
end

@testset "init functions match the Julia defaults" begin
    for (T, init!) in ((LibCkpt.ckpt_collectives, LibCkpt.ckpt_collectives_init),
                       (LibCkpt.ckpt_context_options, LibCkpt.ckpt_context_options_init),
                       (LibCkpt.ckpt_tensor_shard, LibCkpt.ckpt_tensor_shard_init),
                       (LibCkpt.ckpt_save_options, LibCkpt.ckpt_save_options_init),
                       (LibCkpt.ckpt_load_options, LibCkpt.ckpt_load_options_init),
                       (LibCkpt.ckpt_manager_options, LibCkpt.ckpt_manager_options_init),
                       (LibCkpt.ckpt_export_options, LibCkpt.ckpt_export_options_init))
        filled = Ref{T}()
        @test init!(filled, sizeof(T)) == CKPT_OK
        @test filled[].struct_size == sizeof(T)
        @test fields_equal(filled[], T())
    end
end

@testset "dtype map agrees with the library" begin
    for (T, dtype) in Ckpt.DTYPE_OF_TYPE
        @test Ckpt.dtype_size(dtype) == sizeof(T)
        @test Ckpt.julia_type(dtype) === T
    end
    @test Ckpt.dtype_of(Float32) == CKPT_DTYPE_F32
    @test Ckpt.dtype_name(CKPT_DTYPE_BF16) == "BF16"
    @test Ckpt.julia_type(CKPT_DTYPE_BF16) === nothing
    @test_throws ArgumentError Ckpt.dtype_of(String)
end

@testset "status strings name the code" begin
    @test startswith(Ckpt.status_string(CKPT_E_CORRUPT), "CKPT_E_CORRUPT")
    @test occursin("CKPT_E_NOT_FOUND", sprint(showerror, CkptError(CKPT_E_NOT_FOUND, "no such key")))
end

@testset "reader on a missing path throws not found with a message" begin
    mktempdir() do dir
        failure = try
            Reader(joinpath(dir, "absent"))
        catch caught
            caught
        end
        @test failure isa CkptError
        @test failure.status == CKPT_E_NOT_FOUND
        @test !isempty(failure.message)
    end
end

@testset "one rank saves and loads every kind of entry" begin
    mktempdir() do dir
        path = joinpath(dir, "checkpoint")
        ctx = Context(rank = 0, world_size = 1)
        @test (Ckpt.rank(ctx), Ckpt.world_size(ctx), Ckpt.local_rank(ctx)) == (0, 1, 0)
        weight = reshape(Float32.(1:24), 4, 6)
        steps = Int64[10, 20, 30]
        @test save_one_rank(ctx, path, "weight" => weight, "steps" => steps)

        loaded_weight = zeros(Float32, 4, 6)
        loaded_steps = zeros(Int64, 3)
        state = State()
        add_tensor!(state, "weight", loaded_weight)
        add_tensor!(state, "steps", loaded_steps)
        add_object!(state, "blob", nothing)
        load!(ctx, state, path)
        @test loaded_weight == weight
        @test loaded_steps == steps
        @test String(Ckpt.common(state, "step")) == "1200"
        @test String(Ckpt.object(state, "blob")) == "opaque bytes"
        @test failure_status(() -> Ckpt.common(state, "absent")) == CKPT_E_NOT_FOUND
        close(state)
        close(ctx)
    end
end

@testset "flattened range in Julia linear order loads the same elements" begin
    mktempdir() do dir
        path = joinpath(dir, "checkpoint")
        ctx = Context(rank = 0, world_size = 1)
        weight = reshape(Float32.(1:24), 4, 6)
        @test save_one_rank(ctx, path, "weight" => weight)
        part = zeros(Float32, 10)
        state = State()
        add_flattened_tensor!(state, "weight", part, (4, 6), 5:14)
        load!(ctx, state, path; unexpected_keys = CKPT_STRICT_IGNORE)
        @test part == vec(weight)[5:14]
        close(ctx)
    end
end

@testset "state keeps registered arrays alive" begin
    mktempdir() do dir
        path = joinpath(dir, "checkpoint")
        ctx = Context(rank = 0, world_size = 1)
        state = let
            s = State()
            add_tensor!(s, "values", collect(1.0:1000.0))  # no other reference to this array
            s
        end
        GC.gc(true)
        GC.gc(true)
        @test wait(Ckpt.save(ctx, state, path))
        @test Reader(reader -> read(reader, "values"), path) == collect(1.0:1000.0)
        close(ctx)
    end
end

@testset "context options reach the context's stats" begin
    ctx = Context(rank = 0, world_size = 1, io_workers = 0, arena_bytes = TEST_ARENA_BYTES,
                  transport = CKPT_TRANSPORT_NONE)
    counters = Ckpt.stats(ctx)
    @test (counters.io_workers, counters.arena_bytes, counters.transport) == (0, TEST_ARENA_BYTES, CKPT_TRANSPORT_NONE)
    @test (counters.saves_committed, counters.bytes_written, counters.bytes_read) == (0, 0, 0)
    close(ctx)
end

@testset "stats count committed saves, bytes and reused plans" begin
    mktempdir() do dir
        ctx = Context(rank = 0, world_size = 1)
        weight = reshape(Float32.(1:24), 4, 6)
        @test save_one_rank(ctx, joinpath(dir, "first"), "weight" => weight)
        state = State()
        add_tensor!(state, "weight", zeros(Float32, 4, 6))
        add_object!(state, "blob", nothing)
        load!(ctx, state, joinpath(dir, "first"))
        close(state)
        before = Ckpt.stats(ctx)
        @test before.saves_committed >= 1
        @test before.bytes_written > 0
        @test before.bytes_read > 0

        @test save_one_rank(ctx, joinpath(dir, "second"), "weight" => weight)
        after = Ckpt.stats(ctx)
        @test after.plans_reused == before.plans_reused + 1
        @test after.saves_committed == before.saves_committed + 1
        close(ctx)
    end
end

@testset "a request's stats add up once the save committed" begin
    mktempdir() do dir
        ctx = Context(rank = 0, world_size = 1, arena_bytes = TEST_ARENA_BYTES)
        weight = reshape(Float32.(1:1024), 32, 32)
        state = State()
        add_tensor!(state, "weight", weight)
        request = Ckpt.save(ctx, state, joinpath(dir, "c"))
        @test wait(request)
        s = Ckpt.stats(request)
        @test s.committed
        @test (s.state_bytes, s.bytes_to_write, s.bytes_staged, s.bytes_written, s.bytes_committed) ==
              ntuple(_ -> sizeof(weight), 5)
        @test s.files_written >= 1
        @test s.blocking_ns == s.planning_ns + s.staging_ns
        @test s.total_ns == s.blocking_ns + s.writing_ns + s.committing_ns
        close(request)
        close(state)
        close(ctx)
    end
end

@testset "an in-place save is durable when save returns" begin
    mktempdir() do dir
        ctx = Context(rank = 0, world_size = 1, arena_bytes = TEST_ARENA_BYTES)
        weight = reshape(Float32.(1:1024), 32, 32)
        steps = Int64[10, -20, 30, 7]
        scale = Float64[0.5, 1.25, -3.0]
        state = State()
        add_tensor!(state, "weight", weight)
        add_tensor!(state, "steps", steps)
        add_tensor!(state, "scale", scale)
        request = Ckpt.save(ctx, state, joinpath(dir, "c"); in_place = true)
        s = Ckpt.stats(request)
        @test s.bytes_to_write > 0
        @test s.bytes_written == s.bytes_to_write
        @test wait(request)
        close(request)
        close(state)

        loaded = (zeros(Float32, 32, 32), zeros(Int64, 4), zeros(Float64, 3))
        state = State()
        for (key, array) in zip(("weight", "steps", "scale"), loaded)
            add_tensor!(state, key, array)
        end
        load!(ctx, state, joinpath(dir, "c"))
        @test loaded == (weight, steps, scale)
        close(state)
        close(ctx)
    end
end

@testset "a save checking replicas commits and loads back" begin
    mktempdir() do dir
        ctx = Context(rank = 0, world_size = 1, arena_bytes = TEST_ARENA_BYTES)
        weight = reshape(Float32.(1:1024), 32, 32)
        steps = Int64[10, -20, 30, 7]
        state = State()
        add_tensor!(state, "weight", weight)
        add_tensor!(state, "steps", steps)
        request = Ckpt.save(ctx, state, joinpath(dir, "c"); check_replicas = true)
        @test wait(request)
        close(request)
        close(state)

        loaded = (zeros(Float32, 32, 32), zeros(Int64, 4))
        state = State()
        for (key, array) in zip(("weight", "steps"), loaded)
            add_tensor!(state, key, array)
        end
        load!(ctx, state, joinpath(dir, "c"))
        @test loaded == (weight, steps)
        close(state)
        close(ctx)
    end
end

"""The bytes of every file under `dir`."""
directory_bytes(dir) = sum(filesize(joinpath(root, file)) for (root, _, files) in walkdir(dir) for file in files)

@testset "an incremental save writes only the changed array and loads the new values" begin
    mktempdir() do dir
        ctx = Context(rank = 0, world_size = 1, arena_bytes = TEST_ARENA_BYTES)
        weight = reshape(Float32.(1:(1 << 20)), 1 << 14, 64)  # 64 rows of 64 KiB in C order
        bias = [-2.5, -1.5, -0.5, 0.5, 1.5]
        function save_weight_and_bias(path; options...)
            state = State()
            add_tensor!(state, "weight", weight)
            add_tensor!(state, "bias", bias)
            try
                request = Ckpt.save(ctx, state, path; options...)
                done = wait(request)
                close(request)
                return done
            finally
                close(state)
            end
        end
        full, changes = joinpath(dir, "a"), joinpath(dir, "b")
        @test save_weight_and_bias(full; incremental = true)
        bias .*= 2
        @test save_weight_and_bias(changes; incremental = true, base = full)
        @test directory_bytes(joinpath(changes, "data")) * 100 < directory_bytes(joinpath(full, "data"))

        loaded = (zeros(Float32, size(weight)), zeros(Float64, length(bias)))
        state = State()
        for (key, array) in zip(("weight", "bias"), loaded)
            add_tensor!(state, key, array)
        end
        load!(ctx, state, changes)
        @test loaded == (weight, bias)
        close(state)

        refused = joinpath(dir, "c")
        failure = try
            save_weight_and_bias(refused; base = full)
        catch caught
            caught
        end
        @test failure isa CkptError && failure.status == CKPT_E_INVALID_ARGUMENT
        @test failure isa CkptError && occursin("CKPT_SAVE_INCREMENTAL", failure.message)
        @test !ispath(refused)
        close(ctx)
    end
end

"""A weight-like value: small, of both signs, spread over a few binary orders of magnitude."""
function weight_like(i::UInt64)
    h = (i + 1) * 0x9E3779B97F4A7C15
    h ⊻= h >> 29
    h *= 0xBF58476D1CE4E5B9
    h ⊻= h >> 32
    return Float32((Float64(h % 20001) - 10000.0) * 1e-6)
end

@testset "a compressed save loads exactly as format 3 in fewer bytes and is refused in place" begin
    mktempdir() do dir
        ctx = Context(rank = 0, world_size = 1, arena_bytes = TEST_ARENA_BYTES)
        # 2 MiB of BF16 weights (their raw bits), 2 MiB of F32 weights and 2 MiB of I32 in a repeating pattern.
        w = reshape(UInt16[reinterpret(UInt32, weight_like(UInt64(i))) >> 16 for i in 0:(1 << 20) - 1], 1024, 1024)
        m = reshape(Float32[weight_like(UInt64(i + (1 << 20))) for i in 0:(1 << 19) - 1], 1024, 512)
        ids = reshape(Int32[i * 7 % 1000 for i in 0:(1 << 19) - 1], 1024, 512)
        raw_bytes = sizeof(w) + sizeof(m) + sizeof(ids)
        function save_three(path; compress_w = false, options...)
            state = State()
            add_tensor!(state, "w", w; dtype = CKPT_DTYPE_BF16, compress = compress_w)
            add_tensor!(state, "m", m)
            add_tensor!(state, "ids", ids)
            try
                request = Ckpt.save(ctx, state, path; options...)
                done = wait(request)
                close(request)
                return done
            finally
                close(state)
            end
        end
        function loads_exactly(path)
            loaded = (zeros(UInt16, size(w)), zeros(Float32, size(m)), zeros(Int32, size(ids)))
            state = State()
            add_tensor!(state, "w", loaded[1]; dtype = CKPT_DTYPE_BF16)
            add_tensor!(state, "m", loaded[2])
            add_tensor!(state, "ids", loaded[3])
            load!(ctx, state, path)
            close(state)
            return loaded == (w, m, ids)
        end
        format_major(path) = Reader(reader -> Ckpt.checkpoint_info(reader).format_major, path)

        plain, everything, w_only = joinpath(dir, "plain"), joinpath(dir, "all"), joinpath(dir, "w")
        @test save_three(plain)
        @test save_three(everything; compress = true)
        @test save_three(w_only; compress_w = true)
        @test all(loads_exactly, (plain, everything, w_only))
        @test format_major(plain) < 3
        @test format_major(everything) == 3 && format_major(w_only) == 3
        @test Reader(Ckpt.verify, everything) === nothing
        plain_bytes, all_bytes, w_only_bytes =
            (directory_bytes(joinpath(p, "data")) for p in (plain, everything, w_only))
        @test plain_bytes == raw_bytes
        @test all_bytes < raw_bytes * 3 ÷ 4
        # BF16 weights shrink by about 1.5x: "w" alone saves a sixth of its bytes or more.
        @test plain_bytes - w_only_bytes > sizeof(w) ÷ 6
        @test all_bytes < w_only_bytes

        refused = joinpath(dir, "in-place")
        failure = try
            save_three(refused; compress = true, in_place = true)
        catch caught
            caught
        end
        @test failure isa CkptError && failure.status == CKPT_E_INVALID_ARGUMENT
        @test failure isa CkptError && occursin("CKPT_SAVE_COMPRESS", failure.message)
        @test !ispath(refused)
        # An array's flag alone is no refusal: a save in place stores it as it is.
        in_place = joinpath(dir, "w-in-place")
        @test save_three(in_place; compress_w = true, in_place = true)
        @test format_major(in_place) < 3
        @test loads_exactly(in_place)
        close(ctx)
    end
end

@testset "manager keeps the last two steps and resumes from the latest" begin
    mktempdir() do dir
        ctx = Context(rank = 0, world_size = 1)
        root = joinpath(dir, "run")
        Manager(ctx, root; keep_last = 2) do manager
            @test Ckpt.latest(manager) === nothing
            @test Ckpt.resume_step(manager) === nothing
            for step in 1:3
                state = State()
                add_tensor!(state, "weight", fill(Float64(step), 3, 2))
                add_common!(state, "step", string(step))
                request = Ckpt.save(manager, state, step)
                @test wait(request)
                close(request)
                close(state)
            end
            @test Ckpt.latest(manager) == 3
            @test Ckpt.resume_step(manager) == 3
            @test Ckpt.steps(manager) == [2, 3]
            @test basename(Ckpt.step_path(manager, 3)) == "step-000000000003"
            @test !ispath(Ckpt.step_path(manager, 1))
            @test isdir(Ckpt.step_path(manager, 2))

            restored = zeros(Float64, 3, 2)
            state = State()
            add_tensor!(state, "weight", restored)
            @test load_latest!(manager, state) == 3
            @test restored == fill(3.0, 3, 2)
            @test String(Ckpt.common(state, "step")) == "3"
            close(state)
        end
        close(ctx)
    end
end

@testset "a save to memory without a job identity names CKPT_JOB_ID" begin
    mktempdir() do dir
        withenv("CKPT_JOB_ID" => nothing, "SLURM_JOB_ID" => nothing, "TORCHELASTIC_RUN_ID" => nothing) do
            ctx = Context(rank = 0, world_size = 1, arena_bytes = TEST_ARENA_BYTES)
            state = State()
            add_tensor!(state, "weight", zeros(Float32, 4))
            for tier in (CKPT_TIER_MEMORY, CKPT_TIER_BOTH)
                failure = try
                    Ckpt.save(ctx, state, joinpath(dir, "c"); tier = tier)
                catch e
                    e
                end
                @test failure isa CkptError && failure.status == CKPT_E_INVALID_ARGUMENT
                @test failure isa CkptError && occursin("CKPT_JOB_ID", failure.message)
            end
            @test !ispath(joinpath(dir, "c"))
            @test failure_status(() -> Ckpt.save(ctx, state, joinpath(dir, "c"); tier = CKPT_TIER_BOTH + 1)) ==
                  CKPT_E_INVALID_ARGUMENT
            @test_throws ArgumentError Manager(ctx, joinpath(dir, "run"); storage_every = 2)
            Manager(ctx, joinpath(dir, "run"); memory_tier = true, storage_every = 2) do manager
                @test failure_status(() -> Ckpt.save(manager, state, 1)) == CKPT_E_INVALID_ARGUMENT
                @test Ckpt.steps(manager) == Int[]
            end
            close(state)
            close(ctx)
        end
    end
end

@testset "manager of an empty root resumes nothing" begin
    mktempdir() do dir
        ctx = Context(rank = 0, world_size = 1)
        manager = Manager(ctx, joinpath(dir, "run"))
        state = State()
        add_tensor!(state, "weight", zeros(Float32, 2))
        @test load_latest!(manager, state) === nothing
        close(state)
        close(manager)
        close(ctx)
    end
end

@testset "closing a context closes its managers" begin
    mktempdir() do dir
        ctx = Context(rank = 0, world_size = 1)
        manager = Manager(ctx, joinpath(dir, "run"))
        close(ctx)
        @test !isopen(manager)
        @test_throws ArgumentError Ckpt.latest(manager)
        close(manager)  # closing twice is harmless
    end
end

@testset "reader lists and reads in Julia dimension order" begin
    mktempdir() do dir
        path = joinpath(dir, "checkpoint")
        ctx = Context(rank = 0, world_size = 1)
        weight = reshape(Float32.(1:24), 4, 6)
        steps = Int64[10, 20, 30]
        @test save_one_rank(ctx, path, "weight" => weight, "steps" => steps)
        close(ctx)

        Reader(path) do reader
            info = Ckpt.checkpoint_info(reader)
            @test (info.world_size, info.tensor_count, info.object_count) == (1, 2, 1)
            @test (info.common_count, info.metadata_count) == (1, 1)
            @test [t.key for t in Ckpt.tensors(reader)] == ["steps", "weight"]
            tensor = Ckpt.tensor_info(reader, "weight")
            @test (tensor.dtype, tensor.shape) == (CKPT_DTYPE_F32, (4, 6))
            chunks = Ckpt.chunks(reader, "weight")
            @test sum(prod(c.shape) for c in chunks) == 24
            @test all(!isempty(c.file) for c in chunks)
            @test read(reader, "weight") == weight
            @test read(reader, "weight"; offset = (1, 2), shape = (2, 3)) == weight[2:3, 3:5]
            @test read(reader, "steps") == steps
            @test String(Ckpt.common(reader, "step")) == "1200"
            @test Ckpt.common_entries(reader) == ["step" => Vector{UInt8}("1200")]
            @test Ckpt.metadata(reader, "framework") == "julia"
            @test Ckpt.metadata_entries(reader) == ["framework" => "julia"]
            @test failure_status(() -> Ckpt.metadata(reader, "absent")) == CKPT_E_NOT_FOUND
            @test failure_status(() -> Ckpt.tensor_info(reader, "absent")) == CKPT_E_NOT_FOUND
            @test Ckpt.verify(reader) === nothing
        end
    end
end

@testset "export writes safetensors with each tensor whole, in C dimension order" begin
    mktempdir() do dir
        path = joinpath(dir, "checkpoint")
        ctx = Context(rank = 0, world_size = 1)
        weight = reshape(Float32.(1:24) .+ 0.25f0, 4, 6)
        steps = Int64[10, 20, 30]
        state = State()
        add_tensor!(state, "weight", weight[:, 1:3]; global_shape = (4, 6))  # two chunks
        add_tensor!(state, "weight", weight[:, 4:6]; global_shape = (4, 6), global_offset = (0, 3))
        add_tensor!(state, "steps", steps)
        request = Ckpt.save(ctx, state, path)
        @test wait(request)
        close(request)
        close(state)
        close(ctx)

        out = joinpath(dir, "out.safetensors")
        @test Ckpt.export_safetensors(path, out) === nothing
        header, data = read_safetensors(out)
        @test startswith(header, "{\"__metadata__\":{\"format\":\"pt\"}")
        @test safetensors_tensor(header, data, "weight", "F32", "[6,4]") == reinterpret(UInt8, vec(weight))
        @test safetensors_tensor(header, data, "steps", "I64", "[3]") == reinterpret(UInt8, steps)
        @test length(data) == sizeof(weight) + sizeof(steps)

        absent = joinpath(dir, "absent.safetensors")
        @test failure_status(() -> Ckpt.export_safetensors(path, absent; keys = ["absent"])) == CKPT_E_NOT_FOUND
        @test !ispath(absent)

        halved = joinpath(dir, "bf16.safetensors")
        Ckpt.export_safetensors(path, halved; keys = ["weight"], dtype = CKPT_DTYPE_BF16)
        header, data = read_safetensors(halved)
        @test !occursin("steps", header)
        # Every weight value has at most 8 significant bits, so its BF16 is exactly the top half of its F32 bits.
        bf16 = UInt16[reinterpret(UInt32, value) >> 16 for value in vec(weight)]
        @test safetensors_tensor(header, data, "weight", "BF16", "[6,4]") == reinterpret(UInt8, bf16)
        @test length(data) == sizeof(weight) ÷ 2
    end
end

@testset "library errors become CkptError with the status" begin
    mktempdir() do dir
        path = joinpath(dir, "checkpoint")
        ctx = Context(rank = 0, world_size = 1)
        weight = reshape(Float32.(1:24), 4, 6)
        @test save_one_rank(ctx, path, "weight" => weight)
        @test failure_status(() -> save_one_rank(ctx, path, "weight" => weight)) == CKPT_E_ALREADY_EXISTS

        wrong_dtype = State()
        add_tensor!(wrong_dtype, "weight", zeros(Float64, 4, 6))
        @test failure_status(() -> load!(ctx, wrong_dtype, path)) == CKPT_E_MISMATCH

        out_of_bounds = State()
        @test failure_status(() -> add_tensor!(out_of_bounds, "weight", zeros(Float32, 4, 6);
                                               global_shape = (4, 6), global_offset = (1, 0))) ==
              CKPT_E_INVALID_ARGUMENT
        close(ctx)
    end
end

@testset "misuse is refused in Julia" begin
    state = State()
    @test_throws ArgumentError add_tensor!(state, "strings", ["a", "b"])
    @test_throws ArgumentError add_tensor!(state, "nul\0key", zeros(Float32, 2))
    @test_throws ArgumentError add_tensor!(state, "wrong", zeros(Float32, 2); global_shape = (2, 1))
    @test_throws ArgumentError add_tensor!(state, "bf16", zeros(Float32, 2); dtype = CKPT_DTYPE_BF16)
    close(state)
    @test !isopen(state)
    @test_throws ArgumentError add_common!(state, "step", "1")
    close(state)  # closing twice is harmless
end

@testset "two ranks save and reshard through Julia processes" begin
    mktempdir() do dir
        port, server = listenany(ip"127.0.0.1", 29600)
        close(server)
        ranks = map(0:1) do rank
            command = `$(Base.julia_cmd()) --startup-file=no --project=$PACKAGE_DIR $WORKER $dir`
            environment = ("RANK" => string(rank), "WORLD_SIZE" => "2", "LOCAL_RANK" => string(rank),
                           "MASTER_ADDR" => "127.0.0.1", "MASTER_PORT" => string(Int(port)),
                           "CKPT_STORE_PORT" => string(Int(port)),
                           "CKPT_TIMEOUT_MS" => "60000")
            run(addenv(command, environment...); wait = false)
        end
        deadline = time() + 300
        while any(process_running, ranks) && time() < deadline
            sleep(0.1)
        end
        foreach(kill, filter(process_running, ranks))
        @test all(success, ranks)
    end
end

end # @testset "Ckpt"
