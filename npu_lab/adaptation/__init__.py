"""Tools for chapter 8's path of bringing a model up on a new chip.

* :func:`verify` - run a model on ``npu`` and on the CPU and compare outputs
  and gradients with error statistics;
* :func:`readiness` - the adaptation checklist computed live for a model:
  operators covered, conformance, fusion in the compiled graph, speed against
  the CPU;
* :mod:`~npu_lab.adaptation.measure` - where a step's simulated time goes
  (:func:`breakdown`) and how close work gets to the roofline (:func:`efficiency`);
* :mod:`~npu_lab.adaptation.pictures` - the chapter's drawings as SVG: the three
  ways, profile timelines, the roofline, operator coverage of real models;
* :func:`roadmap` - the ten-week plan, each week checked by a measurement.
"""

from .measure import Breakdown, Efficiency, breakdown, breakdown_table, category, efficiency
from .pictures import Svg, coverage_svg, roofline_svg, three_ways_svg, timeline_svg
from .readiness import Readiness, readiness
from .roadmap import ROADMAP, Week, roadmap, roadmap_table
from .verify import Verification, verify

__all__ = ["ROADMAP", "Breakdown", "Efficiency", "Readiness", "Svg", "Verification", "Week", "breakdown",
           "breakdown_table", "category", "coverage_svg", "efficiency", "readiness", "roadmap", "roadmap_table",
           "roofline_svg", "three_ways_svg", "timeline_svg", "verify"]
