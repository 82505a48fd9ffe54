# Stubs of the extension module (crates/python); the public API is in cleave/__init__.py.
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

__version__: str

Dim = Union[int, str, None]

def cli_main(argv: List[str]) -> int: ...
def builtin_devices() -> List[str]: ...
def load_path(
    path: str,
    shape: Optional[Dict[str, List[int]]] = None,
    dim: Optional[Dict[str, int]] = None,
) -> Model: ...
def load_bytes(
    data: bytes,
    name: str = "model",
    shape: Optional[Dict[str, List[int]]] = None,
    dim: Optional[Dict[str, int]] = None,
) -> Model: ...

class Model:
    @property
    def path(self) -> str: ...
    @property
    def format(self) -> str: ...
    @property
    def inputs(self) -> List[Tuple[str, Optional[str], Optional[List[Dim]]]]: ...
    @property
    def outputs(self) -> List[Tuple[str, Optional[str], Optional[List[Dim]]]]: ...
    @property
    def node_count(self) -> int: ...
    @property
    def op_counts(self) -> Dict[str, int]: ...
    def query_json(
        self,
        devices: List[str],
        rules: Optional[str],
        default: Optional[str],
        profiles: List[str],
        optimize: Optional[str],
        objective: str,
        costs: Optional[str],
        margin: float,
        no_constraints: bool,
        allow_disconnected: bool,
    ) -> str: ...
    def partition(
        self,
        devices: List[str],
        rules: Optional[str],
        default: Optional[str],
        profiles: List[str],
        optimize: Optional[str],
        objective: str,
        costs: Optional[str],
        margin: float,
        no_constraints: bool,
        stages: Optional[int],
        memory: List[str],
        allow_disconnected: bool,
        algorithm: str,
        budget_s: float,
    ) -> Plan: ...
    def run(
        self,
        feeds: Dict[str, np.ndarray],
        outputs: Optional[List[str]] = None,
        engine: Optional[str] = None,
    ) -> Dict[str, np.ndarray]: ...

class Plan:
    @property
    def devices(self) -> List[str]: ...
    @property
    def stage_lines(self) -> List[str]: ...
    @property
    def warnings(self) -> List[str]: ...
    def parts_info(self) -> List[Dict[str, Any]]: ...
    def save(self, folder: str, external_data: str = "inline") -> str: ...
    def part_files(self) -> List[Tuple[str, bytes]]: ...
    def report(self) -> str: ...
    def runner(self, engines: Optional[Sequence[Tuple[str, str]]] = None) -> Runner: ...

class Runner:
    @property
    def outputs(self) -> List[str]: ...
    @property
    def boundaries(self) -> List[str]: ...
    def run(self, feeds: Dict[str, np.ndarray], boundaries: bool = False) -> Dict[str, np.ndarray]: ...
