// Norma euclidiana de cada fila: el bloque tiene HILOS hilos (una constante), cada hilo suma
// los cuadrados de su parte de la fila y el árbol divide el paso entre dos.
constexpr int HILOS = 128;

extern "C" __global__ void normas_filas(const float* matriz, float* normas, int columnas)
{
    __shared__ float suma[HILOS];
    const int hilo = threadIdx.x;
    const float* fila = matriz + (size_t)blockIdx.x * columnas;
    float parcial = 0.f;
    for (int j = hilo; j < columnas; j += HILOS) {
        const float v = fila[j];
        parcial += v * v;
    }
    suma[hilo] = parcial;
    __syncthreads();
    for (int paso = HILOS / 2; paso > 0; paso /= 2) {
        if (hilo < paso) suma[hilo] += suma[hilo + paso];
        __syncthreads();
    }
    if (hilo == 0) normas[blockIdx.x] = sqrtf(suma[0]);
}
