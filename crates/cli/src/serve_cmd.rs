//! `cleave serve` and `cleave bench --ray`: the partition checked here, then handed to the
//! Ray Serve application that the library carries.

use std::ffi::OsString;
use std::path::Path;

use cleave::workdir::ConnFile;

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
    let conn = cleave::serve::check_served(&a.conn)?;
    let mut args: Vec<OsString> = Vec::new();
    match (a.ray.as_deref(), a.export.as_deref()) {
        (Some(address), None) => {
            args.extend(["serve".into(), a.conn.as_os_str().into(), "--address".into(), address.into()]);
            if a.detach {
                args.push("--detach".into());
            }
            args.extend(["--timeout".into(), a.timeout.to_string().into()]);
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
    if let Some(n) = a.name.as_deref() {
        args.extend(["--name".into(), n.into()]);
    }
    if let Some(p) = a.http_port {
        args.extend(["--http-port".into(), p.to_string().into()]);
    }
    if let Some(h) = a.http_host.as_deref() {
        args.extend(["--http-host".into(), h.into()]);
    }
    args.extend(a.deploy.to_args());
    run(&[(&a.conn, &conn)], &args)
}

pub struct RayBenchArgs<'a> {
    /// The partitions, benched one after the other.
    pub conns: Vec<&'a Path>,
    pub address: &'a str,
    pub runs: usize,
    pub in_flight: Option<&'a str>,
    pub via: Option<&'a str>,
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
    for (flag, value) in [("--in-flight", a.in_flight), ("--via", a.via)] {
        if let Some(v) = value {
            args.extend([flag.into(), v.into()]);
        }
    }
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
    pub deploy: crate::setup::RayArgs,
    /// HTTP port of the route (default 8000).
    #[arg(long, value_name = "PORT")]
    pub http_port: Option<u16>,
    /// Address Serve's HTTP proxy and the ingress's own listener bind on (default 127.0.0.1;
    /// 0.0.0.0 to answer other machines).
    #[arg(long, value_name = "HOST")]
    pub http_host: Option<String>,
    /// Name of the Ray Serve application (default: the partition's stem).
    #[arg(long)]
    pub name: Option<String>,
    /// Return once deployed instead of serving until interrupted.
    #[arg(long)]
    pub detach: bool,
    /// Seconds to wait for the cluster and for the deployments to come up.
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
    pub timeout: f64,
}
