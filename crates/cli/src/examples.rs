//! The examples at the end of each command's `--help`. Paths are placeholders a user replaces
//! (the docs test holds every flag here to what the command takes).

pub const INSPECT: &str = "Examples:
  cleave inspect model.onnx
  cleave inspect model.onnx --shape images=1,3,640,640 --types";
pub const CONVERT: &str = "Examples:
  cleave convert model.tflite model.circle
  cleave convert model.circle model.tflite";
pub const QUERY: &str = "Examples:
  cleave query model.onnx --devices nnapi,cpu
  cleave query model.tflite --rules model.part --json";
pub const OPTIMIZE: &str = "Examples:
  cleave optimize model.onnx --devices myriad,cpu -o optimized.onnx";
pub const PARTITION: &str = "Examples:
  cleave partition model.onnx --devices nnapi,cpu -o out --report
  cleave partition model.tflite --rules model.part -o out
  cleave partition model.onnx --devices nnapi,cpu --objective latency --costs costs.json -o out
  cleave partition model.onnx --stages 2 --devices g0,g1 --memory g0=16GiB,g1=16GiB -o out";
pub const MEASURE: &str = "Examples:
  cleave measure model.onnx --devices nnapi,cpu --engine nnapi=tract,cpu=ort -o costs.json";
pub const REPORT: &str = "Examples:
  cleave report out/model.conn.json
  cleave report out/model.conn.json --model moved/model.onnx";
pub const RUN: &str = "Examples:
  cleave run out/model.conn.json
  cleave run out/model.conn.json --input images=x.npy -o results
  cleave run out/model.conn.json --engine npu=ort --requests 4";
pub const GENERATE: &str = "Examples:
  cleave generate out/model.conn.json --prompt-ids 1,2,3 --max-new-tokens 32
  cleave generate out/model.conn.json --prompt-ids 1,2,3 --temperature 0.8 --top-p 0.9 --seed 7
  cleave generate out/model.conn.json --state cache_in.0=cache_out.0 --stop-ids 2 --json";
pub const BENCH: &str = "Examples:
  cleave bench out/model.conn.json
  cleave bench model.onnx --devices nnapi,cpu --objective latency --costs costs.json
  cleave bench s1/model.conn.json s2/model.conn.json --ray 127.0.0.1:6379 --data-plane handles";
pub const SERVE: &str = "Examples:
  cleave serve out/model.conn.json --ray 127.0.0.1:6379
  cleave serve out/model.conn.json --ray 127.0.0.1:6379 --replicas cpu=2 --threads npu=4
  cleave serve out/model.conn.json --ray 127.0.0.1:6379 --data-plane handles
  cleave serve out/model.conn.json --ray 127.0.0.1:6379 --ingress-port 8001
  cleave serve out/model.conn.json --export serve_app";
pub const GEN: &str = "Examples:
  cleave gen --nodes 100000 -o g100k.onnx";
pub const VERIFY: &str = "Examples:
  cleave verify model.onnx out/model.conn.json --boundaries
  cleave verify model.onnx --devices nnapi,cpu --shape images=1,3,320,320";
pub const CONFORMANCE: &str = "Examples:
  cleave conformance onnx/backend/test/data/node --engine ort";
pub const CHECK: &str = "Examples:
  cleave check out/model.conn.json";
