"""Tools for chapter 8a and 8b's path of bringing a model up on a new chip.

* :func:`verify` - run a model on ``npu`` and on the CPU and compare outputs
  and gradients with error statistics;
* :func:`readiness` - the adaptation checklist computed live for a model:
  operators covered, conformance, fusion in the compiled graph, speed against
  the CPU;
* :mod:`~npu_lab.adaptation.measure` - where a step's simulated time goes
  (:func:`breakdown`) and how close work gets to the roofline (:func:`efficiency`);
* :mod:`~npu_lab.adaptation.pictures` - the chapter's drawings as SVG: the three
  ways, profile timelines, the roofline, operator coverage of real models;
* :func:`roadmap` - the ten-week plan, each week checked by a measurement;
* :func:`run_fresh` - code run in a fresh Python process (chapter 8a's device registration and autoload);
* :mod:`~npu_lab.adaptation.packaging` - a backend package written, built into a wheel (cached) and installed.
"""

from .fresh import Fresh, run_fresh
from .measure import Breakdown, Efficiency, breakdown, breakdown_table, category, efficiency
from .packaging import Built, build_wheel, files_under, install, sdk_environment, write_package
from .pictures import Svg, coverage_svg, partitions_drawing, roofline_svg, three_ways_svg, timeline_svg
from .readiness import Readiness, readiness
from .roadmap import ROADMAP, Week, roadmap, roadmap_table
from .verify import Verification, verify

__all__ = ["ROADMAP", "Breakdown", "Built", "Efficiency", "Fresh", "Readiness", "Svg", "Verification", "Week",
           "breakdown", "breakdown_table", "build_wheel", "category", "coverage_svg", "efficiency", "files_under",
           "install", "partitions_drawing", "readiness", "roadmap", "roadmap_table", "roofline_svg", "run_fresh",
           "sdk_environment", "three_ways_svg", "timeline_svg", "verify", "write_package"]
