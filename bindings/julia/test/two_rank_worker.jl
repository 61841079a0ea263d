# One rank of the two-rank test in runtests.jl. The rank, world size and store address come from the environment
# (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); ARGS[1] is a directory both ranks reach. Exits 0 only if every
# element this rank loads, and on rank 0 every element the reader returns, is right.

using Ckpt

const ROWS, COLS = 6, 4  # Julia size of the global "weight"

global_weight() = reshape(Float64.(1:ROWS*COLS), ROWS, COLS)

# Saved split: rank r holds columns 2r+1:2r+2 (contiguous rows of the row-major tensor libckpt stores), and a
# replica of "bias".
function save_split(ctx, path, rank)
    columns = 2rank+1:2rank+2
    state = State()
    add_tensor!(state, "weight", global_weight()[:, columns]; global_shape = (ROWS, COLS), global_offset = (0, 2rank))
    add_tensor!(state, "bias", Int32[1, 2, 3]; replica_id = (rank,))
    add_common!(state, "step", "7")
    request = Ckpt.save(ctx, state, path)
    saved = wait(request)
    close(request)
    close(state)
    return saved
end

# Without the job's own collectives, the TCP store carried the save's plan and agreements: the stats count them.
function store_carried_collectives(ctx)
    s = Ckpt.stats(ctx)
    counted = s.control_bytes_sent > 0 && s.control_bytes_received > 0 && s.store_collectives > 0
    counted || println(stderr, "rank $(Ckpt.rank(ctx)): no collective traffic counted after a save: $s")
    return counted
end

# Loaded split: rank r asks for rows 3r+1:3r+3, a layout nobody saved.
function load_split_matches(ctx, path, rank)
    rows = 3rank+1:3rank+3
    part = zeros(Float64, length(rows), COLS)
    bias = zeros(Int32, 3)
    state = State()
    add_tensor!(state, "weight", part; global_shape = (ROWS, COLS), global_offset = (3rank, 0))
    add_tensor!(state, "bias", bias)
    load!(ctx, state, path)
    step = String(Ckpt.common(state, "step"))
    close(state)
    return part == global_weight()[rows, :] && bias == Int32[1, 2, 3] && step == "7"
end

function reader_matches(path)
    Reader(path) do reader
        Ckpt.checkpoint_info(reader).world_size == 2 && read(reader, "weight") == global_weight()
    end
end

function main(dir)
    path = joinpath(dir, "two-ranks")
    ctx = Context()
    rank = Ckpt.rank(ctx)
    ok = Ckpt.world_size(ctx) == 2 && save_split(ctx, path, rank) && store_carried_collectives(ctx) &&
         load_split_matches(ctx, path, rank)
    ok = ok && (rank != 0 || reader_matches(path))
    close(ctx)
    ok || println(stderr, "rank $rank: the loaded elements differ from the saved ones")
    return ok
end

exit(main(ARGS[1]) ? 0 : 1)
