//! `cleave serve` and `cleave bench --ray`: the partition checked here, then handed to the
//! Ray Serve application that the library carries.

use std::ffi::OsString;
use std::path::Path;

use cleave::workdir::ConnFile;

use crate::setup::RayArgs;
use crate::Fail;

pub struct ServeArgs<'a> {
    pub conn: &'a Path,
    pub ray: Option<&'a str>,
    pub export: Option<&'a Path>,
    pub deploy: &'a RayArgs,
    pub http_port: Option<u16>,
    pub name: Option<&'a str>,
    pub detach: bool,
    pub timeout_s: f64,
}

/// Runs the application, saying which engine serves its circle parts.
fn run(path: &Path, conn: &ConnFile, args: &[OsString]) -> Result<(), Fail> {
    let app = cleave::serve::ray_app(path, conn, args)?;
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

pub fn serve(a: ServeArgs) -> Result<(), Fail> {
    let conn = cleave::serve::check_served(a.conn)?;
    let mut args: Vec<OsString> = Vec::new();
    match (a.ray, a.export) {
        (Some(address), None) => {
            args.extend(["serve".into(), a.conn.into(), "--address".into(), address.into()]);
            if let Some(p) = a.http_port {
                args.extend(["--http-port".into(), p.to_string().into()]);
            }
            if let Some(n) = a.name {
                args.extend(["--name".into(), n.into()]);
            }
            if a.detach {
                args.push("--detach".into());
            }
            args.extend(["--timeout".into(), a.timeout_s.to_string().into()]);
        }
        (None, Some(dir)) => {
            args.extend(["export".into(), a.conn.into(), dir.into()]);
        }
        _ => {
            return Err(Fail::usage(
                "give --ray ADDRESS (deploy on a running cluster) or --export DIR (write a Ray Serve application)",
            ))
        }
    }
    args.extend(a.deploy.to_args());
    run(a.conn, &conn, &args)
}

pub struct RayBenchArgs<'a> {
    pub conn: &'a Path,
    pub address: &'a str,
    pub runs: usize,
    pub requests: usize,
    pub deploy: &'a RayArgs,
    pub json: bool,
}

pub fn bench(a: RayBenchArgs) -> Result<(), Fail> {
    let conn = cleave::serve::check_served(a.conn)?;
    let in_flight = if a.requests > 1 {
        format!("1,{}", a.requests)
    } else {
        "1".to_string()
    };
    let mut args: Vec<OsString> = vec![
        "bench".into(),
        a.conn.into(),
        "--address".into(),
        a.address.into(),
        "--requests".into(),
        a.runs.to_string().into(),
        "--in-flight".into(),
        in_flight.into(),
    ];
    args.extend(a.deploy.to_args());
    if a.json {
        args.push("--json".into());
    }
    run(a.conn, &conn, &args)
}
