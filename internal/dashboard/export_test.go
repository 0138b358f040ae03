package dashboard

// The helpers of the package's own tests that its browser tests
// (package dashboard_test) use too.
var (
	BuildCluster = buildCluster
	ServePage    = servePage
	WaitState    = waitState
)
