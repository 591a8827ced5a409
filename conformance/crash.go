package conformance

func init() {
	register(check{name: "ProcessCrash", run: testProcessCrash, ttls: 20})
}
