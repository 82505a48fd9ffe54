//! `cleave serve` and `cleave bench --ray`: the partition checked here, then handed to the
//! Ray Serve application that the library carries.

use std::ffi::OsString;
use std::path::Path;

use cleave::workdir::ConnFile;

use crate::serve_flags::{Bench, Cluster, Flags, Route, Serve as ServeOnly};
use crate::setup::RayArgs;
use crate::Fail;

/// Runs the application on the partitions `conns`, saying which engine serves their circle
/// parts.
fn run(conns: &[(&Path, &ConnFile)], args: &[OsString]) -> Result<(), Fail> {
    let app = cleave::serve::ray_app(conns, args)?;
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    if app.converted > 0 {
        eprintln!(
            "note: {} circle part{} converted to TFLite for LiteRT (pip install onert to serve them as they are)",
            app.converted,
            plural(app.converted)
        );
    }
    if app.on_onert > 0 {
        eprintln!(
            "note: {} circle part{} served on onert",
            app.on_onert,
            plural(app.on_onert)
        );
    }
    finish(app.run()?)
}

fn finish(code: i32) -> Result<(), Fail> {
    if code == 0 {
        Ok(())
    } else {
        // The application printed its own one-line reason.
        Err(Fail::exit(code))
    }
}

pub fn serve(a: Args) -> Result<(), Fail> {
    if a.export.is_some() && (a.cluster.any() || a.serve.any()) {
        return Err(Fail::usage(format!(
            "{} and {} apply to a deployment: give them with --ray ADDRESS, not --export",
            Flags::<Cluster>::names(),
            Flags::<ServeOnly>::names()
        )));
    }
    let conn = cleave::serve::check_served(&a.conn)?;
    let mut args: Vec<OsString> = Vec::new();
    match (a.ray.as_deref(), a.export.as_deref()) {
        (Some(address), None) => {
            args.extend(["serve".into(), a.conn.as_os_str().into(), "--address".into(), address.into()]);
            args.extend(a.cluster.to_args());
            args.extend(a.serve.to_args());
        }
        (None, Some(dir)) => {
            args.extend(["export".into(), a.conn.as_os_str().into(), dir.into()]);
        }
        _ => {
            return Err(Fail::usage(
                "give --ray ADDRESS (deploy on a running cluster) or --export DIR (write a Ray Serve application)",
            ))
        }
    }
    // The exported serve_config.yaml and app.py take the name, the route's port and host too.
    args.extend(a.route.to_args());
    args.extend(a.deploy.to_args());
    run(&[(&a.conn, &conn)], &args)
}

pub struct RayBenchArgs<'a> {
    /// The partitions, benched one after the other.
    pub conns: Vec<&'a Path>,
    pub address: &'a str,
    pub runs: usize,
    pub bench: &'a Flags<Bench>,
    pub deploy: &'a RayArgs,
    pub json: bool,
}

pub fn bench(a: RayBenchArgs) -> Result<(), Fail> {
    let mut read = Vec::with_capacity(a.conns.len());
    for c in &a.conns {
        read.push(cleave::serve::check_served(c)?);
    }
    let mut args: Vec<OsString> = vec!["bench".into()];
    args.extend(a.conns.iter().map(|c| c.as_os_str().to_os_string()));
    args.extend([
        "--address".into(),
        a.address.into(),
        "--requests".into(),
        a.runs.to_string().into(),
    ]);
    args.extend(a.bench.to_args());
    args.extend(a.deploy.to_args());
    if a.json {
        args.push("--json".into());
    }
    let conns: Vec<(&Path, &ConnFile)> = a.conns.iter().copied().zip(read.iter()).collect();
    run(&conns, &args)
}

// `cleave serve`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The partition's stem.conn.json (its part files beside it).
    pub conn: std::path::PathBuf,
    /// Address of the running cluster's head (HOST:PORT), as `ray start --head` printed it.
    #[arg(
        long,
        value_name = "ADDRESS",
        required_unless_present = "export",
        conflicts_with = "export"
    )]
    pub ray: Option<String>,
    /// Instead of deploying: write a self-contained Ray Serve application to DIR (the
    /// parts, conn.json, app.py and serve_config.yaml), for `serve run` / `serve deploy`.
    #[arg(long, value_name = "DIR")]
    pub export: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub deploy: RayArgs,
    #[command(flatten)]
    pub route: Flags<Route>,
    #[command(flatten)]
    pub cluster: Flags<Cluster>,
    #[command(flatten)]
    pub serve: Flags<ServeOnly>,
}
