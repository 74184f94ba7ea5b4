-- loupe trace database schema (documented in trace/README.md, "The trace database").
-- Created once per database; schema_version in `meta` guards migrations.
PRAGMA foreign_keys = ON;

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS runs (
    id            INTEGER PRIMARY KEY,
    status        TEXT NOT NULL DEFAULT 'running',  -- 'running' until committed, then 'complete'
    kind          TEXT NOT NULL DEFAULT 'trace',    -- 'trace' or 'leak'
    model_path    TEXT NOT NULL,
    model_format  TEXT NOT NULL,
    architecture  TEXT NOT NULL,                    -- family, e.g. 'llama'
    arch_json     TEXT,                             -- the normalized description
    prompt        TEXT,
    n_tokens      INTEGER NOT NULL,
    n_layers      INTEGER NOT NULL,
    n_heads       INTEGER NOT NULL,
    n_threads     INTEGER NOT NULL,
    isa           TEXT NOT NULL,
    loupe_version TEXT NOT NULL,
    maps_dtype    TEXT NOT NULL,                    -- 'f16', 'f32' or 'none'
    started_at    TEXT NOT NULL,
    finished_at   TEXT,
    seconds       REAL,
    kv_bytes      INTEGER,                          -- generation: the KV cache's bytes, else NULL
    kv_dtype      TEXT,                             -- generation: 'f32', 'f16', 'bf16', 'q8_0'
    kv_rebuilt_at INTEGER,                          -- longrope: length the cache was rebuilt at
    dataset       TEXT,                             -- --prompts: the dataset's name, else NULL
    prompt_index  INTEGER,                          -- --prompts: the prompt's line order, from 0
    prompt_id     TEXT,                             -- --prompts: the line's "id", or NULL
    batch_id      INTEGER,                          -- --batch-size: the batch (from 0), else NULL
    batch_index   INTEGER,                          -- the sequence's index in its batch
    pad_left      INTEGER,                          -- padding tokens before the sequence
    pad_right     INTEGER                           -- and after it
);

CREATE TABLE IF NOT EXISTS tokens (
    run_id   INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    pos      INTEGER NOT NULL,
    token_id INTEGER NOT NULL,
    piece    TEXT NOT NULL,                -- the vocabulary string, as stored ("▁the", "Ġthe")
    label    TEXT,                         -- the text it stands for, for axis labels
    generated INTEGER NOT NULL DEFAULT 0,  -- 1 for tokens loupe trace --generate produced
    PRIMARY KEY (run_id, pos)
);

-- Row-major [n_q, n_k] probabilities, little-endian f16 or f32.
CREATE TABLE IF NOT EXISTS attention (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    layer  INTEGER NOT NULL,
    head   INTEGER NOT NULL,
    n_q    INTEGER NOT NULL,
    n_k    INTEGER NOT NULL,
    dtype  TEXT NOT NULL CHECK (dtype IN ('f16', 'f32')),
    probs  BLOB NOT NULL,
    PRIMARY KEY (run_id, layer, head)
);

CREATE TABLE IF NOT EXISTS head_stats (
    run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    layer         INTEGER NOT NULL,
    head          INTEGER NOT NULL,
    entropy       REAL NOT NULL,   -- mean over query rows, nats
    max_prob      REAL NOT NULL,
    sink          REAL NOT NULL,   -- mean mass on position 0
    prev_token    REAL NOT NULL,   -- mean mass on the previous position
    self          REAL NOT NULL,   -- mean mass on the query's own position
    distance      REAL NOT NULL,   -- mean expected query - key distance
    local_frac    REAL NOT NULL,   -- mean mass within the local window
    local_window  INTEGER NOT NULL,
    output_norm   REAL NOT NULL,   -- mean L2 norm of the head's output vector
    keys50        REAL,            -- mean smallest k whose top-k keys hold 50% of a row's mass
    keys90        REAL,            -- likewise 90%
    keys99        REAL,            -- likewise 99%
    low_mass      REAL,            -- mean mass on keys with probability below 1e-3
    learned_sink  REAL,            -- mean probability on the head's learned sink (gpt-oss): its
                                   -- rows sum to 1 minus it over the keys; NULL without sinks
    PRIMARY KEY (run_id, layer, head)
);

-- Top-k next-token predictions per position.
CREATE TABLE IF NOT EXISTS predictions (
    run_id   INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    pos      INTEGER NOT NULL,
    rank     INTEGER NOT NULL,
    token_id INTEGER NOT NULL,
    piece    TEXT NOT NULL,
    prob     REAL NOT NULL,
    logit    REAL NOT NULL,
    PRIMARY KEY (run_id, pos, rank)
);

-- Full logits per position (--logits full), little-endian f32 [vocab].
CREATE TABLE IF NOT EXISTS logits (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    pos    INTEGER NOT NULL,
    data   BLOB NOT NULL,
    PRIMARY KEY (run_id, pos)
);

-- MoE routing: how many tokens each expert of each layer received, and the router's entropy.
CREATE TABLE IF NOT EXISTS expert_routing (
    run_id         INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    layer          INTEGER NOT NULL,
    expert         INTEGER NOT NULL,
    tokens         INTEGER NOT NULL,
    mean_weight    REAL NOT NULL,
    PRIMARY KEY (run_id, layer, expert)
);
CREATE TABLE IF NOT EXISTS router_stats (
    run_id         INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    layer          INTEGER NOT NULL,
    mean_entropy   REAL NOT NULL,
    PRIMARY KEY (run_id, layer)
);

-- Datasets (loupe trace --prompts): one row per name; runs.dataset points here.
CREATE TABLE IF NOT EXISTS datasets (
    name       TEXT PRIMARY KEY,
    source     TEXT NOT NULL,      -- the prompts file
    n_prompts  INTEGER NOT NULL    -- prompts in the file (all shards)
);
-- Head statistics aggregated over a dataset's complete runs, recomputed after each dataset run
-- and by loupe merge: mean and (population) standard deviation over runs.
CREATE TABLE IF NOT EXISTS dataset_stats (
    dataset  TEXT NOT NULL,
    layer    INTEGER NOT NULL,
    head     INTEGER NOT NULL,
    stat     TEXT NOT NULL,        -- a head_stats column: 'entropy', 'prev_token', ...
    n_runs   INTEGER NOT NULL,
    mean     REAL NOT NULL,
    std      REAL NOT NULL,
    PRIMARY KEY (dataset, layer, head, stat)
);

-- Results of `loupe leak`.
CREATE TABLE IF NOT EXISTS leak_checks (
    run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    check_name  TEXT NOT NULL,      -- 'perturbation', 'attention_map', 'structural', 'alignment', 'mask'
    passed      INTEGER NOT NULL,
    layer       INTEGER,            -- -1 for the logits
    position    INTEGER,
    max_abs_diff REAL,
    detail      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS leak_checks_run ON leak_checks(run_id);
