//! A model from any bytes through everything `cleave partition` does before writing files:
//! load and validation, type inference, assignment on two built-in profiles, fused groups,
//! partitioning, the plan's proof, and each part built as a model in memory. Every step may
//! refuse the model; none may panic, and a partition of a model that got this far must pass
//! validation (a failure there is a bug in the partitioner, so it panics).
#![no_main]

use cleave_assign::{assign, AssignOptions};
use cleave_device::Profiles;
use cleave_ir::OpSemantics;
use cleave_onnx::{OnnxModel, OnnxSemantics};
use cleave_partition::{partition_default, validate, Options, Plan, UnitGraph};
use libfuzzer_sys::{fuzz_mutator, fuzz_target};

#[path = "mutate.rs"]
mod mutate;

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    mutate::mutate(data, size, max_size, seed)
});

fuzz_target!(|data: &[u8]| {
    let bytes = bytes::Bytes::copy_from_slice(data);
    let Ok(model) = OnnxModel::from_bytes(bytes, "fuzz.onnx".into()) else {
        return;
    };
    let Ok(mut ir) = cleave_onnx::to_checked_ir(&model) else {
        return;
    };
    cleave_onnx::infer_types(&mut ir);
    let g = &ir.graph;
    let sem = OnnxSemantics;
    let constant = sem.constant_nodes(g);
    let profiles = Profiles::builtin();
    for devices in [["myriad", "cpu"], ["nnapi", "cpu"]] {
        let opts = AssignOptions {
            devices: devices.iter().map(|d| d.to_string()).collect(),
            default: None,
            part: None,
        };
        let Ok(a) = assign(g, &profiles, &opts, &constant, &sem) else {
            continue;
        };
        let units = UnitGraph::from_assignment(g, &a, &a.glue(g, &sem));
        for allow_disconnected in [false, true] {
            let p = partition_default(&units, Options { allow_disconnected });
            let plan = match Plan::build(g, &a, &units, &p) {
                Ok(plan) => plan,
                Err(e) => panic!("the plan of a default partition failed: {e}"),
            };
            let plan = match validate(g, &a, plan) {
                Ok(v) => v,
                Err(e) => panic!("a default partition failed validation: {e}"),
            };
            for k in 0..plan.parts.len() {
                let _ = cleave_onnx::emit::part_model(&model, &ir, &plan, k);
            }
        }
    }
});
