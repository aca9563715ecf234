"""Where a record's time goes: CPU per record of one bench scenario in this process
(``profile_send``), Python lines and calls per record (``trace_lines``), the native hot
path alone (``native_micro``, ``appender_micro``), and instruction counts under
callgrind (``callgrind_native.sh``, ``callgrind_producer.sh``). See ``bench/README.md``.
"""
