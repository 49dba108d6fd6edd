"""Schedule files and pictures: the JSON schedule format, torch's CSV, Perfetto traces, text and Gantt renderings."""
