// Job specs to start from in the submit form (the repository's examples/*.yaml).
export const EXAMPLES: { id: string; label: string; text: string }[] = [
  {
    id: "ps",
    label: "Parameter server (digits)",
    text: `# ParameterServerStrategy: a coordinator (chief), two workers and one parameter server
# train a small classifier on scikit-learn's digits data set.
name: digits-ps
strategy: parameter_server
entrypoint: [python, examples/digits.py, --epochs, "5", --steps-per-execution, "4", --validation-steps, "5", --evaluate-steps, "5"]
working_dir: .
env: {DIGITS_BATCH: "64"}
replicas:
  chief: {count: 1, gpus: 0}
  worker: {count: 2, gpus: 1}
  ps: {count: 1, gpus: 0}
  evaluator: {count: 0}
checkpoint: {dir: null, every_epochs: 1}
restart: {policy: on_failure, max_restarts: 3, backoff_seconds: 2}
# When training ends, the coordinator exports the model as a SavedModel to
# <checkpoint dir>/export (format auto: SavedModel for tf_keras, .keras for Keras 3).
export: {dir: export, format: auto}
`,
  },
  {
    id: "mwm",
    label: "Multi-worker mirrored (digits)",
    text: `# MultiWorkerMirroredStrategy: two workers train in lockstep (all-reduce).
name: digits-mwm
strategy: multi_worker_mirrored
entrypoint: [python, examples/digits.py, --epochs, "5"]
working_dir: .
env: {DIGITS_BATCH: "64"}
replicas:
  worker: {count: 2, gpus: 1}
  evaluator: {count: 0}
checkpoint: {dir: null, every_epochs: 1}
restart: {policy: on_failure, max_restarts: 3, backoff_seconds: 2}
`,
  },
  {
    id: "mirrored",
    label: "Mirrored, one process (digits)",
    text: `# MirroredStrategy: one process trains on all of its local devices.
name: digits-mirrored
strategy: mirrored
entrypoint: [python, examples/digits.py, --epochs, "5"]
working_dir: .
env: {DIGITS_BATCH: "64"}
replicas:
  chief: {count: 1, gpus: 1}
  evaluator: {count: 0}
checkpoint: {dir: null, every_epochs: 1}
restart: {policy: on_failure, max_restarts: 3, backoff_seconds: 2}
`,
  },
];
