"""Google's pprof profile.proto (perftools.profiles) with its generated code; see generate.py."""
