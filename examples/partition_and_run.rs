//! The library's whole pipeline on the bundled example, as a program:
//! `cargo run --example partition_and_run [MODEL.onnx RULES.part]`.
//!
//! Loads the model, places every node by ONE's `.part` rules, cuts the fewest valid parts,
//! writes them with ONE's connection files into a temporary folder, runs the parts and the
//! whole model on the same seeded input, and prints each output's largest difference.

use std::path::PathBuf;

use cleave::runtime::HostTensor;
use cleave::{load_model, Algorithm, AssignRequest, Devices, ExternalData};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let model_path = args.next().unwrap_or_else(|| here.join("tiny_cnn.onnx"));
    let rules = args.next().unwrap_or_else(|| here.join("tiny_cnn.part"));

    // A partition's life, one type per stage: loaded, assigned, partitioned (proven), written.
    let devices = Devices::part_file(&rules)?;
    let assigned = load_model(&model_path)?.into_assigned(devices, &AssignRequest::default())?;
    let default = Algorithm::Default {
        allow_disconnected: false,
    };
    let mut partitioned = assigned.into_partitioned(default, &mut Vec::new())?;
    let workdir = tempfile::tempdir()?;
    let written = partitioned.write(workdir.path(), ExternalData::Inline)?;
    for p in &written.parts {
        println!("{} ({} nodes on {})", p.file, p.nodes, p.backend);
    }

    // One seeded input per graph input, with batch-like dims at 1.
    let model = &partitioned.assigned.loaded;
    let g = model.graph();
    let mut feed = Vec::new();
    for (k, &v) in g.inputs.iter().enumerate() {
        let value = g.value(v);
        let dims: Vec<usize> = value
            .ty
            .shape
            .iter()
            .flatten()
            .map(|d| d.fixed().map_or(1, |n| usize::try_from(n).unwrap_or(1)))
            .collect();
        let elem = value.ty.elem.ok_or("an input has no element type")?;
        feed.push((
            value.name.to_string(),
            HostTensor::random(elem, &dims, k as u64)?,
        ));
    }

    let mut parts = written.load(&cleave::engine_map(&[])?, false)?;
    let split = parts.run(feed.clone(), &mut [])?;
    let engine = cleave::default_engine(model.path())?;
    let mut whole = cleave::engine(engine.clone())?.load(model.path(), false)?;
    for (name, want) in whole.run(&feed)? {
        let d = split[&name].diff(&want, 1e-4, 1e-5);
        println!(
            "{name}: max |parts - whole| = {:.2e} on {} ({} beyond tolerance)",
            d.max_abs,
            engine.label(),
            d.beyond
        );
        if d.beyond > 0 {
            return Err(format!("output '{name}' differs").into());
        }
    }
    Ok(())
}
