"""TFLite models with WHILE, converted by TensorFlow as real exports contain them.

    python3 scripts/testdata/tf_while_models.py DEST     # DEST/tflite-while/*.tflite (cached)

TensorFlow (tensorflow-cpu, pinned below) lives in a virtual environment of its own,
$CLEAVE_TF_VENV (default ~/.cache/cleave/tf-venv), made on first use and used only to make
these models; nothing else imports it. Three models, seeded:

- keras_gru: a Keras GRU stack (two layers, the first returning sequences) and a Dense head,
  converted from Keras: each GRU stays a WHILE loop over its 12 steps.
- lstm_loop: an LSTM cell in Keras's generic RNN layer (keras.layers.LSTM itself becomes the
  fused UNIDIRECTIONAL_SEQUENCE_LSTM), which stays a WHILE loop over its 9 steps.
- while_halve: tf.while_loop whose trip count depends on the data (halve until the sum of
  absolute values is at most 1, at most 20 times), the count used after the loop.

The folder is written whole or not at all (a temporary folder renamed into place), with a
stamp named after this script's hash, so a changed script makes them again.
"""
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

TENSORFLOW = "tensorflow-cpu==2.21.0"
MODELS = ("keras_gru", "lstm_loop", "while_halve")


def stamp_of():
    return hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:16]


def venv_python():
    venv = pathlib.Path(os.environ.get("CLEAVE_TF_VENV", pathlib.Path.home() / ".cache/cleave/tf-venv"))
    python = venv / "bin" / "python"
    probe = [str(python), "-c", f"import tensorflow as tf; assert tf.__version__ == '{TENSORFLOW.split('==')[1]}'"]
    if python.exists() and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return python
    print(f"installing {TENSORFLOW} into {venv} (used only to make test models)")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    TENSORFLOW], check=True)
    subprocess.run(probe, check=True)
    return python


def make(out):
    """Runs inside the TensorFlow venv: writes the models into out."""
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf

    tf.keras.utils.set_random_seed(7)

    def save(name, converter):
        (out / f"{name}.tflite").write_bytes(converter.convert())

    gru = tf.keras.Sequential([tf.keras.Input((12, 8), batch_size=1),
                               tf.keras.layers.GRU(16, return_sequences=True),
                               tf.keras.layers.GRU(16),
                               tf.keras.layers.Dense(4)])
    save("keras_gru", tf.lite.TFLiteConverter.from_keras_model(gru))

    # keras.layers.LSTM converts to the fused UNIDIRECTIONAL_SEQUENCE_LSTM; the generic RNN
    # wrapper around its cell stays a loop.
    lstm = tf.keras.Sequential([tf.keras.Input((9, 6), batch_size=1),
                                tf.keras.layers.RNN(tf.keras.layers.LSTMCell(10)),
                                tf.keras.layers.Dense(3)])
    save("lstm_loop", tf.lite.TFLiteConverter.from_keras_model(lstm))

    class Halve(tf.Module):
        def __init__(self):
            self.w = tf.constant(tf.random.normal((4, 4), seed=3))

        @tf.function(input_signature=[tf.TensorSpec((1, 4), tf.float32)])
        def __call__(self, x):
            y = tf.nn.relu(tf.matmul(x, self.w))

            def cond(i, v):
                return tf.logical_and(tf.reduce_sum(tf.abs(v)) > 1.0, i < 20)

            def body(i, v):
                return i + 1, v * 0.5 + 0.01

            n, v = tf.while_loop(cond, body, (tf.constant(0), y))
            return tf.tanh(v) * tf.cast(n, tf.float32)

    halve = Halve()
    save("while_halve", tf.lite.TFLiteConverter.from_concrete_functions(
        [halve.__call__.get_concrete_function()], halve))


def fetch(dest):
    out = dest / "tflite-while"
    stamp = out / f".complete-{stamp_of()}"
    if stamp.exists():
        print(f"WHILE models already in {out}")
        return
    python = venv_python()
    dest.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=".tflite-while-", dir=dest))
    try:
        subprocess.run([str(python), __file__, "--make", str(tmp)], check=True)
        missing = [m for m in MODELS if not (tmp / f"{m}.tflite").is_file()]
        if missing:
            raise RuntimeError(f"TensorFlow did not write {missing}")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (tmp / stamp.name).touch()
    tmp.chmod(0o755)
    old = dest / f".tflite-while-old-{stamp_of()}"
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    print(f"WHILE models written to {out}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--make":
        make(pathlib.Path(sys.argv[2]))
    elif len(sys.argv) == 2:
        fetch(pathlib.Path(sys.argv[1]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
